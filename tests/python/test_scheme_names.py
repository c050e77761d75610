"""Which files know a scheme by name, outside its own files and the generated ones
(scripts/scheme-name-audit): a scheme that is its declaration (Sandwich, Forgetting Attention,
and any scheme declared from now on) is known nowhere else, and no scheme becomes known in more
files than tests/data/scheme_name_ceiling.json allows (the older schemes, still known by hand in
the engine's registry, the CLI, the binding and the case tables, move down to 0 one by one).
"""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CEILING = json.loads((ROOT / "tests" / "data" / "scheme_name_ceiling.json").read_text())["ceiling"]


def audit():
    posenc = os.environ.get("POSENC_BIN", str(ROOT / "build" / "release" / "posenc"))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "scheme-name-audit"), "--posenc",
                        posenc, "--format", "json"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def test_no_scheme_is_known_in_more_files_than_before():
    found = audit()
    for name, files in found.items():
        allowed = CEILING.get(name, 0)
        assert len(files) <= allowed, (
            f"{name} is known by name in {len(files)} files outside its own, at most {allowed} "
            f"allowed (tests/data/scheme_name_ceiling.json): {files}")


def test_schemes_that_are_their_declaration_are_known_nowhere_else():
    found = audit()
    for name in ("sandwich", "fox"):
        assert found[name] == [], f"{name} is known by name in {found[name]}"
    assert CEILING["sandwich"] == CEILING["fox"] == 0
