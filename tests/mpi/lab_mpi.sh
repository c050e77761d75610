#!/usr/bin/env bash
# posenc lab under mpirun (ctest: lab_mpi_bitwise, lab_mpi_killed_rank).
#   lab_mpi.sh bitwise POSENC MPIRUN   2 ranks give the bits of 1 process: the same checkpoints
#                                      (parameters, AdamW moments, loss curve) byte for byte and
#                                      the same evaluation numbers; so do 4 ranks split into 2
#                                      rank groups, a run stopped and resumed under mpirun, and
#                                      the context-extension preset
#   lab_mpi.sh killed POSENC MPIRUN    a rank killed with SIGKILL ends the job with a non-zero
#                                      exit within 15 seconds
set -uo pipefail
mode=$1 posenc=$2 mpirun=$3
mpi=("$mpirun" -np 2 --oversubscribe --allow-run-as-root)
export OMPI_MCA_rmaps_base_oversubscribe=1 POSENC_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A small text corpus: training and held-out parts.
python3 - "$dir" <<'PY'
import sys, random
r = random.Random(3)
words = ["the", "of", "and", "to", "her", "was", "it", "in", "not", "be", "she", "that"]
text = " ".join(r.choice(words) for _ in range(3000))
cut = len(text) * 4 // 5
open(sys.argv[1] + "/train.txt", "w").write(text[:cut])
open(sys.argv[1] + "/held.txt", "w").write(text[cut:])
PY

tiny=(lab --task passkey --schemes alibi,learned --train-len 9:12 --eval-lens 12,24 --steps 6
      --seeds 2 --batch 10 --d-model 16 --layers 1 --heads 2 --d-ff 32 --eval-samples 40
      --format csv --no-progress)
text=(lab --preset press --file "$dir/train.txt" --eval-file "$dir/held.txt" --schemes rope
      --train-len 16 --steps 4 --seeds 1 --batch 10 --d-model 16 --layers 1 --heads 2
      --d-ff 32 --eval-chars 600 --format csv --no-progress)
ext=(lab --preset extend --file "$dir/train.txt" --eval-file "$dir/held.txt" --train-len 16
     --steps 3 --finetune-steps 2 --search-budget 4 --seeds 1 --batch 10 --d-model 16 --layers 1
     --heads 2 --d-ff 32 --eval-chars 600 --needle-samples 3 --format csv --no-progress)

case $mode in
  bitwise)
    "$posenc" "${tiny[@]}" --out "$dir/one" > "$dir/one.csv" || fail "1 process"
    "${mpi[@]}" "$posenc" "${tiny[@]}" --out "$dir/two" > "$dir/two.csv" || fail "2 ranks"
    cmp "$dir/one.csv" "$dir/two.csv" || fail "evaluation differs between 1 process and 2 ranks"
    for f in "$dir"/one/checkpoints/*.ckpt; do
      cmp "$f" "$dir/two/checkpoints/$(basename "$f")" || fail "$(basename "$f") differs"
    done
    [ "$(ls "$dir"/one/checkpoints | wc -l)" -eq 4 ] || fail "expected 4 checkpoints"
    # 4 ranks, 2 shards per step (batch 8): 2 rank groups of 2 share the 4 runs; the same numbers.
    t8=("${tiny[@]}")
    t8[14]=8  # --batch
    "$mpirun" -np 4 --oversubscribe --allow-run-as-root "$posenc" "${t8[@]}" > "$dir/four.csv" \
      || fail "4 ranks"
    "$posenc" "${t8[@]}" > "$dir/one8.csv" || fail "1 process, batch 8"
    cmp "$dir/one8.csv" "$dir/four.csv" || fail "rank groups differ from 1 process"
    # Interrupted under mpirun after 2 steps, resumed under mpirun: the same bits.
    "${mpi[@]}" "$posenc" "${tiny[@]}" --out "$dir/res" --stop-after 2 > /dev/null || fail "stop"
    "${mpi[@]}" "$posenc" "${tiny[@]}" --out "$dir/res" --resume > "$dir/res.csv" || fail "resume"
    cmp "$dir/one.csv" "$dir/res.csv" || fail "resumed run differs"
    for f in "$dir"/one/checkpoints/*.ckpt; do
      cmp "$f" "$dir/res/checkpoints/$(basename "$f")" || fail "resumed $(basename "$f") differs"
    done
    # The held-out text evaluation (both window modes) split over ranks.
    "$posenc" "${text[@]}" > "$dir/t1.csv" || fail "text, 1 process"
    "${mpi[@]}" "$posenc" "${text[@]}" > "$dir/t2.csv" || fail "text, 2 ranks"
    cmp "$dir/t1.csv" "$dir/t2.csv" || fail "text evaluation differs between 1 process and 2 ranks"
    # The context-extension preset: training (needle batches included), LongRoPE's search,
    # zero-shot and fine-tuned runs, bits per byte and the retrieval grid.
    "$posenc" "${ext[@]}" > "$dir/e1.csv" || fail "extend, 1 process"
    "${mpi[@]}" "$posenc" "${ext[@]}" > "$dir/e2.csv" || fail "extend, 2 ranks"
    cmp "$dir/e1.csv" "$dir/e2.csv" || fail "extend preset differs between 1 process and 2 ranks"
    echo "bitwise: 1 process = 2 ranks (training, evaluation, resume, text windows, extend preset with its needle batches and retrieval grid) = 4 ranks in groups"
    ;;
  killed)
    long=("${tiny[@]}")
    long[10]=1000000  # --steps
    "${mpi[@]}" "$posenc" "${long[@]}" > /dev/null 2> "$dir/err" &
    job=$!
    ranks=""
    for _ in $(seq 100); do
      ranks=$(pgrep -P "$job" -x posenc | tr '\n' ' ')
      [ "$(echo $ranks | wc -w)" -ge 2 ] && break
      sleep 0.1
    done
    [ "$(echo $ranks | wc -w)" -ge 2 ] || { kill "$job"; fail "ranks did not start: '$ranks'"; }
    sleep 1
    victim=$(echo $ranks | cut -d' ' -f2)
    start=$(date +%s.%N)
    kill -9 "$victim"
    for _ in $(seq 150); do kill -0 "$job" 2> /dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2> /dev/null; then
      kill -9 "$job" $ranks 2> /dev/null
      fail "mpirun still running 15 s after a rank was killed"
    fi
    wait "$job"
    rc=$?
    took=$(echo "$(date +%s.%N) - $start" | bc)
    [ "$rc" -ne 0 ] || fail "exit 0 after a rank was killed"
    echo "killed rank: mpirun exited with $rc after $took s"
    head -c 600 "$dir/err"
    ;;
  *) fail "mode must be bitwise or killed, got '$mode'" ;;
esac
