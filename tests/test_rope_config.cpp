// RoPE configurations from real Hugging Face config.json files (tests/data/rope/): parsing,
// precedence warnings, errors that name the key, and the frequencies / attention factors of
// every scaling type against values derived independently by tests/data/rope/derive.py
// (Python standard library only; formulas and papers listed in its docstring).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/core/error.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/formats/hf_config.hpp"
#include "test_support.hpp"

using namespace posenc;

namespace {

// Golden values: output of `python3 tests/data/rope/derive.py` (frequency part), pasted.
// ---- frequencies of the real configs ----
// llama2_7b: D=128 R=128 theta=10000.0
const std::vector<double> kLlama2 = {1.0,
                                     0.8659643233600653,
                                     0.7498942093324559,
                                     0.6493816315762113,
                                     0.5623413251903491,
                                     0.48696752516586306,
                                     0.4216965034285823,
                                     0.36517412725483767,
                                     0.31622776601683794,
                                     0.27384196342643613,
                                     0.23713737056616555,
                                     0.2053525026457146,
                                     0.17782794100389226,
                                     0.1539926526059492,
                                     0.1333521432163324,
                                     0.1154781984689458,
                                     0.1,
                                     0.08659643233600654,
                                     0.07498942093324558,
                                     0.06493816315762113,
                                     0.056234132519034905,
                                     0.04869675251658631,
                                     0.042169650342858224,
                                     0.03651741272548377,
                                     0.03162277660168379,
                                     0.02738419634264361,
                                     0.02371373705661655,
                                     0.020535250264571463,
                                     0.01778279410038923,
                                     0.01539926526059492,
                                     0.01333521432163324,
                                     0.011547819846894583,
                                     0.01,
                                     0.008659643233600653,
                                     0.007498942093324559,
                                     0.006493816315762114,
                                     0.005623413251903491,
                                     0.004869675251658632,
                                     0.004216965034285823,
                                     0.003651741272548377,
                                     0.003162277660168379,
                                     0.0027384196342643613,
                                     0.002371373705661655,
                                     0.002053525026457146,
                                     0.001778279410038923,
                                     0.0015399265260594918,
                                     0.001333521432163324,
                                     0.0011547819846894581,
                                     0.001,
                                     0.0008659643233600654,
                                     0.0007498942093324557,
                                     0.0006493816315762112,
                                     0.0005623413251903491,
                                     0.00048696752516586315,
                                     0.0004216965034285823,
                                     0.0003651741272548377,
                                     0.00031622776601683794,
                                     0.00027384196342643616,
                                     0.00023713737056616554,
                                     0.0002053525026457146,
                                     0.00017782794100389227,
                                     0.0001539926526059492,
                                     0.0001333521432163324,
                                     0.00011547819846894582};
// codellama_7b: D=128 R=128 theta=1000000
const std::vector<double> kCodeLlama = {1.0,
                                        0.8058421877614819,
                                        0.6493816315762113,
                                        0.5232991146814947,
                                        0.4216965034285823,
                                        0.3398208328942559,
                                        0.27384196342643613,
                                        0.220673406908459,
                                        0.17782794100389226,
                                        0.14330125702369628,
                                        0.1154781984689458,
                                        0.0930572040929699,
                                        0.07498942093324558,
                                        0.06042963902381328,
                                        0.04869675251658631,
                                        0.03924189758484536,
                                        0.03162277660168379,
                                        0.025482967479793464,
                                        0.020535250264571463,
                                        0.016548170999431816,
                                        0.01333521432163324,
                                        0.010746078283213174,
                                        0.008659643233600653,
                                        0.006978305848598663,
                                        0.005623413251903491,
                                        0.004531583637600818,
                                        0.003651741272548377,
                                        0.0029427271762092816,
                                        0.002371373705661655,
                                        0.0019109529749704406,
                                        0.0015399265260594918,
                                        0.0012409377607517195,
                                        0.001,
                                        0.0008058421877614819,
                                        0.0006493816315762112,
                                        0.0005232991146814947,
                                        0.0004216965034285823,
                                        0.0003398208328942559,
                                        0.00027384196342643616,
                                        0.00022067340690845895,
                                        0.00017782794100389227,
                                        0.00014330125702369627,
                                        0.00011547819846894582,
                                        9.30572040929699e-05,
                                        7.498942093324559e-05,
                                        6.0429639023813276e-05,
                                        4.869675251658631e-05,
                                        3.9241897584845363e-05,
                                        3.1622776601683795e-05,
                                        2.5482967479793468e-05,
                                        2.0535250264571462e-05,
                                        1.6548170999431813e-05,
                                        1.333521432163324e-05,
                                        1.0746078283213174e-05,
                                        8.659643233600654e-06,
                                        6.978305848598664e-06,
                                        5.623413251903491e-06,
                                        4.531583637600818e-06,
                                        3.651741272548377e-06,
                                        2.942727176209282e-06,
                                        2.3713737056616552e-06,
                                        1.9109529749704404e-06,
                                        1.539926526059492e-06,
                                        1.2409377607517195e-06};
// llama3_1_8b.json: D=128 R=128 llama3 s=8.0
const std::vector<double> kLlama31 = {1.0,
                                      0.8146172338565447,
                                      0.6636012376960885,
                                      0.540581004635767,
                                      0.44036660267178046,
                                      0.35873022375128993,
                                      0.2922278225730151,
                                      0.2380538204803507,
                                      0.19392274474868576,
                                      0.15797280990904317,
                                      0.12868737343265052,
                                      0.10483095217796996,
                                      0.08539710028576561,
                                      0.06956594961416032,
                                      0.056669621445291044,
                                      0.04616405026546052,
                                      0.03760603093086393,
                                      0.030634520893224042,
                                      0.024955408670558694,
                                      0.020329105980970156,
                                      0.016560440080994446,
                                      0.013490419890226748,
                                      0.010989528534539826,
                                      0.0089522593361944,
                                      0.0072926647372171085,
                                      0.005940730375674967,
                                      0.004839421345719893,
                                      0.003942276030116656,
                                      0.0032114459947525913,
                                      0.002166570763503359,
                                      0.0013718935677611381,
                                      0.0008567514129196321,
                                      0.0005248461609929547,
                                      0.00031269375038406517,
                                      0.00017850781276799638,
                                      9.556212353964683e-05,
                                      7.78465527393245e-05,
                                      6.341514345777615e-05,
                                      5.165906874818956e-05,
                                      4.208236768725526e-05,
                                      3.428102195952591e-05,
                                      2.7925911282444464e-05,
                                      2.2748928601828183e-05,
                                      1.8531669290821308e-05,
                                      1.509621717643313e-05,
                                      1.2297638677963614e-05,
                                      1.0017868402809974e-05,
                                      8.160728247435943e-06,
                                      6.647869871181236e-06,
                                      5.415469365499923e-06,
                                      4.411534674558404e-06,
                                      3.593712173650999e-06,
                                      2.9274998701761677e-06,
                                      2.3847918463583037e-06,
                                      1.942692537204043e-06,
                                      1.58255082089091e-06,
                                      1.2891731721515574e-06,
                                      1.0501826834601687e-06,
                                      8.55496912644366e-07,
                                      6.969025285511675e-07,
                                      5.677088100759837e-07,
                                      4.6246538050008837e-07,
                                      3.7673226901739635e-07,
                                      3.068925988914511e-07};
// llama3_2_1b.json: D=64 R=64 llama3 s=32.0
const std::vector<double> kLlama32 = {1.0,
                                      0.6636012376960885,
                                      0.44036660267178046,
                                      0.2922278225730151,
                                      0.19392274474868576,
                                      0.12868737343265052,
                                      0.08539710028576561,
                                      0.056669621445291044,
                                      0.03760603093086393,
                                      0.024955408670558694,
                                      0.016560440080994446,
                                      0.010989528534539826,
                                      0.0072926647372171085,
                                      0.004839421345719893,
                                      0.0032114459947525913,
                                      0.001290547928209264,
                                      0.00042955679655936815,
                                      9.70828780262767e-05,
                                      1.9461638184831125e-05,
                                      1.291476718704739e-05,
                                      8.570255489881478e-06,
                                      5.687232150457046e-06,
                                      3.7740542941082826e-06,
                                      2.5044671007024935e-06,
                                      1.661967467795309e-06,
                                      1.102883668639601e-06,
                                      7.318749675440419e-07,
                                      4.856731343010108e-07,
                                      3.2229329303788936e-07,
                                      2.138742281610915e-07,
                                      1.4192720251899592e-07,
                                      9.418306725434909e-08};
// qwen2_5_7b_yarn: D=128 R=128 yarn s=4.0 (explicit factor wins) lo,hi=(23, 40) a=1.138629436111989
const std::vector<double> kQwenYarn = {1.0,
                                       0.8058421877614819,
                                       0.6493816315762113,
                                       0.5232991146814947,
                                       0.4216965034285823,
                                       0.3398208328942559,
                                       0.27384196342643613,
                                       0.220673406908459,
                                       0.17782794100389226,
                                       0.14330125702369628,
                                       0.1154781984689458,
                                       0.0930572040929699,
                                       0.07498942093324558,
                                       0.06042963902381328,
                                       0.04869675251658631,
                                       0.03924189758484536,
                                       0.03162277660168379,
                                       0.025482967479793464,
                                       0.020535250264571463,
                                       0.016548170999431816,
                                       0.01333521432163324,
                                       0.010746078283213174,
                                       0.008659643233600653,
                                       0.006978305848598663,
                                       0.005375321490790102,
                                       0.004131738022518394,
                                       0.003168422574711092,
                                       0.0024234223804076435,
                                       0.001848276564706878,
                                       0.0014051124815959123,
                                       0.0010643609812470017,
                                       0.0008029597275452302,
                                       0.0006029411764705882,
                                       0.00045032357551376927,
                                       0.00033424054566422634,
                                       0.0002462584069089387,
                                       0.00017984115587395423,
                                       0.00012993149493015669,
                                       9.262301704129459e-05,
                                       6.490394320837028e-05,
                                       4.445698525097307e-05,
                                       3.582531425592407e-05,
                                       2.8869549617236455e-05,
                                       2.3264301023242475e-05,
                                       1.8747355233311396e-05,
                                       1.5107409755953319e-05,
                                       1.2174188129146578e-05,
                                       9.810474396211341e-06,
                                       7.905694150420949e-06,
                                       6.370741869948367e-06,
                                       5.133812566142866e-06,
                                       4.137042749857953e-06,
                                       3.33380358040831e-06,
                                       2.6865195708032935e-06,
                                       2.1649108084001634e-06,
                                       1.744576462149666e-06,
                                       1.4058533129758728e-06,
                                       1.1328959094002045e-06,
                                       9.129353181370943e-07,
                                       7.356817940523205e-07,
                                       5.928434264154138e-07,
                                       4.777382437426101e-07,
                                       3.84981631514873e-07,
                                       3.102344401879299e-07};
const double kQwenYarnA = 1.138629436111989;
// deepseek_v2: D=64 R=64 yarn s=40 lo,hi=(10, 23) a=1.0
const std::vector<double> kDeepSeekYarn = {1.0,
                                           0.7498942093324559,
                                           0.5623413251903491,
                                           0.4216965034285823,
                                           0.31622776601683794,
                                           0.23713737056616555,
                                           0.17782794100389226,
                                           0.1333521432163324,
                                           0.1,
                                           0.07498942093324558,
                                           0.056234132519034905,
                                           0.03900692656714386,
                                           0.026879360111431223,
                                           0.018378146218877827,
                                           0.01244795587027246,
                                           0.008334508951020777,
                                           0.0055,
                                           0.0035619974943291656,
                                           0.002249365300761396,
                                           0.0013705136361428923,
                                           0.0007905694150420945,
                                           0.00041499039849078964,
                                           0.0001778279410038922,
                                           3.33380358040831e-05,
                                           2.5e-05,
                                           1.8747355233311396e-05,
                                           1.4058533129758728e-05,
                                           1.0542412585714557e-05,
                                           7.905694150420947e-06,
                                           5.9284342641541385e-06,
                                           4.445698525097307e-06,
                                           3.33380358040831e-06};
const double kDeepSeekYarnA = 1.0;
const double kYarnRatioA = 1.0857263992561355;  // s=40, mscale 1.0 / mscale_all_dim 0.707
// phi3 longrope: D=96 R=96 s=32.0 a=1.1902380714238083
const std::vector<double> kPhi3Short = {
    0.9523809523809523,     0.7860992240647795,     0.6488495895790107,     0.511219386536681,
    0.42196262123752526,    0.34828971359611705,    0.2529822128134703,     0.2088125772546029,
    0.15388819214513452,    0.12263995931302911,    0.09469672694335929,    0.06548798154749125,
    0.052631578947368404,   0.041270209263400914,   0.03406460345289804,    0.028117066259517442,
    0.02320794416806389,    0.019155934247786426,   0.01581138830084189,    0.01305078607841268,
    0.010772173450159411,   0.00889139705019461,    0.0073389963381103466,  0.006057638293142938,
    0.0049999999999999975,  0.004127020926340089,   0.003406460345289806,   0.002811706625951744,
    0.0023207944168063877,  0.0019155934247786436,  0.001581138830084189,   0.0013050786078412674,
    0.0010259212809675638,  0.0008467997190661535,  0.0006671814852827586,  0.0005155436845228038,
    0.0004255319148936171,  0.00035123582351830567, 0.00028991151874806876, 0.00023430888549597884,
    0.00019339953473386572, 0.00014457308866253928, 0.00011712139482105116, 9.000542123043235e-05,
    7.303168440786056e-05,  5.8304242952095876e-05, 4.8124566151543285e-05, 3.972221831569147e-05};
const std::vector<double> kPhi3Long = {
    0.970873813375653,      0.7860992597639546,     0.6488496190452593,     0.5206864489959006,
    0.37736497654392104,    0.31147863101292006,    0.24325213662769515,    0.18001085134043662,
    0.13465217615288785,    0.1077745190431278,     0.07725259884909466,    0.042361108498851746,
    0.027100272333473823,   0.01522886063221746,    0.012409692121338658,   0.010243011814840485,
    0.005106258257092918,   0.003308451532641424,   0.0020193344131423864,  0.0016551409624367402,
    0.001364429825989088,   0.0009685617379752755,  0.0006674848944518357,  0.0005249253304304379,
    0.00033322227788412293, 0.00025514810722387975, 0.00020904939739862057, 0.00015813870729701156,
    0.00011618493871740514, 7.115874010494568e-05,  5.6268281184922227e-05, 4.5041535970642743e-05,
    3.633723255437026e-05,  2.9752037525924455e-05, 2.4495980066522897e-05, 1.979943675047006e-05,
    1.613944305425957e-05,  1.3206465352170938e-05, 1.0751017808387737e-05, 8.85855799716511e-06,
    7.311890846299553e-06,  6.018200439189568e-06,  4.952666183056578e-06,  4.073278449332236e-06,
    3.326797969656069e-06,  2.7442578964823394e-06, 2.264772376697305e-06,  1.8693525984053542e-06};
const double kPhi3A = 1.1902380714238083;
// pythia_70m: D=64 R=16
const std::vector<double> kPythia = {1.0,  0.31622776601683794,  0.1,   0.03162277660168379,
                                     0.01, 0.003162277660168379, 0.001, 0.00031622776601683794};
// dynamic: theta' = 30527.7367488067
const std::vector<double> kDynamic = {1.0,
                                      0.8509942913412162,
                                      0.7241912838953388,
                                      0.6162826484339994,
                                      0.5244530156699793,
                                      0.4463065224118377,
                                      0.37980430276082444,
                                      0.32321129347629257,
                                      0.2750509656453355,
                                      0.23406680159206947,
                                      0.1991895119473482,
                                      0.16950913756223632,
                                      0.14425130839563602,
                                      0.12275703996318751,
                                      0.10446554023061812,
                                      0.08889957837813219,
                                      0.0756530337024315,
                                      0.06438029980341385,
                                      0.054787267607541205,
                                      0.046623651972201106,
                                      0.03967646166982278,
                                      0.03376444238163776,
                                      0.028733347717093155,
                                      0.02445191487836844,
                                      0.020808439973852896,
                                      0.01770786362946518,
                                      0.015069290860523618,
                                      0.012823880496865963,
                                      0.010913049095674894,
                                      0.009286942481545758,
                                      0.007903135035809668,
                                      0.0067255227991727855,
                                      0.005723381508381237,
                                      0.004870564990800312,
                                      0.004144823002777449,
                                      0.0035272207139833674,
                                      0.0030016446919003343,
                                      0.002554382497441848,
                                      0.0021737649232249317,
                                      0.0018498615403821942,
                                      0.001574221610636916,
                                      0.0013396536039579903,
                                      0.0011400375693429363,
                                      0.0009701654634253549,
                                      0.0008256052710313823,
                                      0.0007025853725489239,
                                      0.000597896141218976,
                                      0.0005088062029922902,
                                      0.00043299117414543904,
                                      0.000368473017398899,
                                      0.0003135684343197357,
                                      0.0002668449475508982,
                                      0.0002270835270390606,
                                      0.0001932467851678693,
                                      0.00016445191099789922,
                                      0.000139947637459366,
                                      0.0001190946405646106,
                                      0.00010134885924981768,
                                      8.624730065553926e-05,
                                      7.339596050145345e-05,
                                      6.245954339424227e-05,
                                      5.3152714868279144e-05,
                                      4.5232656922192936e-05,
                                      3.849273282298194e-05};

std::string data(const std::string& name) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/data/rope/" + name;
}

rope_config load(const std::string& name, std::vector<std::string>* w = nullptr) {
  std::vector<std::string> local;
  return rope_config_from_file(data(name), w ? w : &local);
}

// Frequencies: derive.py evaluates the same closed forms in double (theta ** (2i/R) is C pow);
// allowing 1 ulp for a different pow and 1 ulp for each of the few roundings after it, the
// relative error is <= 4 eps = 2^-51.
void expect_freqs(const rope_freqs& f, const std::vector<double>& golden) {
  ASSERT_EQ(f.inv_freq.size(), golden.size());
  for (size_t i = 0; i < golden.size(); ++i)
    EXPECT_NEAR(f.inv_freq[i], golden[i], 0x1p-51 * golden[i]) << "pair " << i;
}

std::string expect_invalid(const nlohmann::json& j) {
  std::vector<std::string> w;
  try {
    rope_config_from_json(j, &w);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no invalid_argument for " << j.dump();
  return "";
}

nlohmann::json llama2_json() {
  return nlohmann::json::parse(test::read_text(data("llama2_7b.json")));
}

}  // namespace

TEST(RopeConfig, Llama2Default) {
  std::vector<std::string> w;
  auto c = load("llama2_7b.json", &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.head_dim, 128);  // 4096 / 32
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_EQ(c.type, rope_type::default_);
  EXPECT_EQ(c.theta, 10000.0);
  auto f = rope_frequencies(c);
  expect_freqs(f, kLlama2);
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(RopeConfig, CodeLlamaTheta1e6) {
  auto c = load("codellama_7b.json");
  EXPECT_EQ(c.theta, 1e6);
  EXPECT_EQ(c.max_position_embeddings, 16384);
  expect_freqs(rope_frequencies(c), kCodeLlama);
}

TEST(RopeConfig, Llama31AndItsRopeParametersForm) {
  std::vector<std::string> w;
  auto c = load("llama3_1_8b.json", &w);
  EXPECT_TRUE(w.empty()) << w.front();  // llama3 does not use the length ratio: no warning
  EXPECT_EQ(c.type, rope_type::llama3);
  EXPECT_EQ(c.factor, 8.0);
  EXPECT_EQ(c.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.theta, 500000.0);
  auto f = rope_frequencies(c);
  expect_freqs(f, kLlama31);
  EXPECT_EQ(f.attention_factor, 1.0);
  // The newer rope_parameters layout (rope_theta inside it) gives the same configuration.
  auto c2 = load("llama3_1_8b_rope_parameters.json");
  EXPECT_EQ(c2.theta, 500000.0);
  EXPECT_EQ(c2.type, rope_type::llama3);
  EXPECT_EQ(rope_frequencies(c2).inv_freq, f.inv_freq);
  // Spot check of the three llama3 regimes (wavelen = 2 pi / omega, orig = 8192):
  // pair 0: wavelen 6.28 < 8192/4 -> kept = 1; the last pair: wavelen > 8192 -> omega / 8.
  EXPECT_EQ(f.inv_freq[0], 1.0);
  EXPECT_NEAR(f.inv_freq[63], std::pow(500000.0, -126.0 / 128) / 8, 1e-30);
}

TEST(RopeConfig, Llama32HeadDimKey) {
  auto c = load("llama3_2_1b.json");
  EXPECT_EQ(c.head_dim, 64);  // explicit head_dim (2048 / 32 = 64 as well)
  EXPECT_EQ(c.factor, 32.0);
  expect_freqs(rope_frequencies(c), kLlama32);
}

TEST(RopeConfig, QwenYarnExplicitFactorWinsWithWarning) {
  std::vector<std::string> w;
  auto c = load("qwen2_5_7b_yarn.json", &w);
  EXPECT_EQ(c.type, rope_type::yarn);  // legacy key "type"
  EXPECT_EQ(c.factor, 4.0);            // explicit, although 32768 / 32768 = 1
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("rope_scaling.factor = 4 disagrees"), std::string::npos) << w[0];
  auto f = rope_frequencies(c);
  expect_freqs(f, kQwenYarn);
  // a = 0.1 ln 4 + 1 (Peng et al. 2023, eq. 22 / HF default), to 2 eps.
  EXPECT_NEAR(f.attention_factor, kQwenYarnA, 0x1p-52);
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1, 0x1p-52);
}

TEST(RopeConfig, DeepSeekV2YarnMscale) {
  std::vector<std::string> w;
  auto c = load("deepseek_v2.json", &w);
  EXPECT_TRUE(w.empty()) << w.front();  // factor 40 = 163840 / 4096
  EXPECT_EQ(c.head_dim, 64);            // qk_rope_head_dim, not 5120 / 128 = 40
  EXPECT_EQ(c.rotary_dim, 64);
  ASSERT_TRUE(c.mscale && c.mscale_all_dim);
  auto f = rope_frequencies(c);
  expect_freqs(f, kDeepSeekYarn);
  EXPECT_EQ(f.attention_factor, kDeepSeekYarnA);  // equal mscales: ratio exactly 1
  // Unequal mscales: get_mscale(40, 1.0) / get_mscale(40, 0.707).
  c.mscale = 1.0;
  c.mscale_all_dim = 0.707;
  EXPECT_NEAR(rope_frequencies(c).attention_factor, kYarnRatioA, 0x1p-51);
  // Only one given: HF uses 0.1 ln s + 1 and the reader warns.
  auto j = nlohmann::json::parse(test::read_text(data("deepseek_v2.json")));
  j["rope_scaling"].erase("mscale_all_dim");
  std::vector<std::string> w2;
  auto c2 = rope_config_from_json(j, &w2);
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_NE(w2[0].find("mscale is given without mscale_all_dim"), std::string::npos);
  EXPECT_NEAR(rope_frequencies(c2).attention_factor, 0.1 * std::log(40.0) + 1, 0x1p-52);
  // An explicit attention_factor wins over both.
  c.attention_factor = 0.5;
  EXPECT_EQ(rope_frequencies(c).attention_factor, 0.5);
}

TEST(RopeConfig, Phi3LongRopeShortLongSwitch) {
  std::vector<std::string> w;
  auto c = load("phi3_vision_128k_longrope.json", &w);
  EXPECT_TRUE(w.empty()) << w.front();
  EXPECT_EQ(c.type, rope_type::longrope);  // legacy type "su"
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.factor, 32.0);  // no factor: 131072 / 4096
  EXPECT_EQ(c.original_max_position_embeddings, 4096);
  // seq_len 0 (unknown) and up to the original context: short_factor; beyond: long_factor.
  expect_freqs(rope_frequencies(c, 0), kPhi3Short);
  expect_freqs(rope_frequencies(c, 4096), kPhi3Short);
  expect_freqs(rope_frequencies(c, 4097), kPhi3Long);
  EXPECT_NEAR(rope_frequencies(c, 4097).attention_factor, kPhi3A, 0x1p-52);
  EXPECT_NEAR(kPhi3A, std::sqrt(17.0 / 12.0), 1e-15);  // 1 + ln 32 / ln 4096 = 1 + 5/12
}

TEST(RopeConfig, PythiaPartialRotary) {
  auto c = load("pythia_70m.json");
  EXPECT_EQ(c.head_dim, 64);    // 512 / 8
  EXPECT_EQ(c.rotary_dim, 16);  // rotary_pct 0.25
  auto f = rope_frequencies(c);
  expect_freqs(f, kPythia);  // over R = 16, not D = 64
  EXPECT_NEAR(f.inv_freq[1], std::pow(10000.0, -2.0 / 16), 1e-16);
}

TEST(RopeConfig, DynamicNtkDependsOnSeqLen) {
  auto j = llama2_json();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  auto c = rope_config_from_json(j, nullptr);
  expect_freqs(rope_frequencies(c, 8192), kDynamic);
  // At or below max_position_embeddings (and for 0 = unknown) the base is unchanged.
  expect_freqs(rope_frequencies(c, 0), kLlama2);
  expect_freqs(rope_frequencies(c, 4096), kLlama2);
}

TEST(RopeConfig, LinearDividesByFactor) {
  auto j = llama2_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto f = rope_frequencies(rope_config_from_json(j, nullptr));
  for (size_t i = 0; i < kLlama2.size(); ++i)
    EXPECT_NEAR(f.inv_freq[i], kLlama2[i] / 4, 0x1p-51 * kLlama2[i] / 4);
}

TEST(RopeConfig, YarnWithoutFactorTakesTheLengthRatio) {
  auto j = llama2_json();
  j["max_position_embeddings"] = 16384;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 4096}};
  std::vector<std::string> w;
  auto c = rope_config_from_json(j, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(c.factor, 4.0);
  // Factor equal to the ratio: no warning.
  j["rope_scaling"]["factor"] = 4.0;
  rope_config_from_json(j, &w);
  EXPECT_TRUE(w.empty());
  // Neither factor nor a ratio: an error naming the key. (A named class would supply
  // max_position_embeddings: LlamaConfig's 2048 gives the ratio 0.5, refused below.)
  j.erase("max_position_embeddings");
  j["rope_scaling"].erase("factor");
  EXPECT_NE(expect_invalid(j).find("max_position_embeddings / original_max_position_embeddings = "
                                   "2048 / 4096 must be >= 1"),
            std::string::npos);
  j.erase("model_type");
  j.erase("architectures");
  EXPECT_NE(expect_invalid(j).find("rope_scaling.factor is missing"), std::string::npos);
}

TEST(RopeConfig, LongRopeExplicitFactorWarnsAndWins) {
  auto j = nlohmann::json::parse(test::read_text(data("phi3_vision_128k_longrope.json")));
  j["rope_scaling"]["factor"] = 8.0;
  std::vector<std::string> w;
  auto c = rope_config_from_json(j, &w);
  EXPECT_EQ(c.factor, 8.0);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("using factor = 8"), std::string::npos) << w[0];
  // a = sqrt(1 + ln 8 / ln 4096) = sqrt(1 + 3/12).
  EXPECT_NEAR(rope_frequencies(c).attention_factor, std::sqrt(1.25), 1e-15);
}

TEST(RopeConfig, ErrorsNameTheKey) {
  auto j = llama2_json();
  auto bad = j;
  bad["model_type"] = "gpt_neox";
  bad["partial_rotary_factor"] = 0.3;  // 128 * 0.3 = 38.4: transformers' int() gives 38
  {
    std::vector<std::string> w;
    const auto c = rope_config_from_json(bad, &w);
    EXPECT_EQ(c.rotary_dim, 38);
    ASSERT_FALSE(w.empty());
    EXPECT_NE(w[0].find("truncated as transformers does"), std::string::npos) << w[0];
  }
  bad["partial_rotary_factor"] = 0.29;  // 128 * 0.29 = 37.12: 37 is odd
  EXPECT_NE(expect_invalid(bad).find("int(head_dim * partial_rotary_factor)"), std::string::npos);
  bad = j;
  bad["head_dim"] = 80;
  bad["partial_rotary_factor"] = 0.1125;  // 80 * 0.1125 = 9: odd
  EXPECT_NE(expect_invalid(bad).find("even integer"), std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}};
  EXPECT_NE(expect_invalid(bad).find("rope_scaling.factor must be >= 1, got 0.5"),
            std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"type", "linear"}};
  EXPECT_NE(expect_invalid(bad).find("rope_scaling.factor is required"), std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"type", "ntk-by-parts"}, {"factor", 2.0}};
  EXPECT_NE(expect_invalid(bad).find("rope_scaling.rope_type must be one of"), std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"type", "linear"}, {"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_NE(expect_invalid(bad).find("disagree"), std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"type", "linear"}, {"factor", "2"}};
  EXPECT_NE(expect_invalid(bad).find("rope_scaling.factor must be a number"), std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"factor", 2.0}};
  EXPECT_NE(expect_invalid(bad).find("rope_scaling.rope_type (or rope_scaling.type) is missing"),
            std::string::npos);
  bad = j;
  bad["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  EXPECT_NE(expect_invalid(bad).find("rope_scaling.low_freq_factor is required"),
            std::string::npos);
  auto phi = nlohmann::json::parse(test::read_text(data("phi3_vision_128k_longrope.json")));
  phi["rope_scaling"]["long_factor"].erase(0);
  EXPECT_NE(expect_invalid(phi).find("rope_scaling.long_factor must have rotary_dim/2 = 48 "
                                     "entries, got 47"),
            std::string::npos);
  // Without hidden_size a named class supplies its own (LlamaConfig: 4096, with a note); a
  // config that names no class cannot derive head_dim.
  bad = j;
  bad.erase("hidden_size");
  std::vector<std::string> notes;
  EXPECT_EQ(rope_config_from_json(bad, &notes).head_dim, 4096 / 32);
  EXPECT_NE(notes.at(0).find("hidden_size is missing; took transformers' LlamaConfig default 4096"),
            std::string::npos)
      << notes.at(0);
  bad.erase("model_type");
  bad.erase("architectures");
  EXPECT_NE(expect_invalid(bad).find("head_dim is missing"), std::string::npos);
  bad = j;
  bad["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 0.25}};
  EXPECT_NE(expect_invalid(bad).find("rope_parameters.factor must be >= 1"), std::string::npos);
  EXPECT_NE(expect_invalid(nlohmann::json::array()).find("JSON object"), std::string::npos);
}

TEST(RopeConfig, FilesThatCannotBeReadAreIoErrors) {
  test::temp_dir d;
  std::vector<std::string> w;
  EXPECT_THROW(rope_config_from_file(d.file("missing.json"), &w), io_error);
  std::string p = d.file("bad.json");
  FILE* fp = std::fopen(p.c_str(), "w");
  std::fputs("{\"hidden_size\": 4096,", fp);
  std::fclose(fp);
  EXPECT_THROW(rope_config_from_file(p, &w), io_error);
  // A directory: the reason, not only "cannot read".
  try {
    rope_config_from_file(d.path, &w);
    ADD_FAILURE() << "a directory was read";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find("Is a directory"), std::string::npos) << e.what();
  }
}

// Python's json module writes non-finite floats as NaN, Infinity and -Infinity (its default,
// allow_nan=True). Such a config is read, and the key holding one is named with the number it
// is; the same words inside a string stay a string.
TEST(RopeConfig, NonFiniteTokensOfPythonJsonNameTheirKey) {
  test::temp_dir d;
  const auto message = [&](const std::string& text) {
    const std::string p = d.file("c.json");
    FILE* fp = std::fopen(p.c_str(), "w");
    std::fputs(text.c_str(), fp);
    std::fclose(fp);
    try {
      rope_config_from_file(p, nullptr);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(
      message(R"({"head_dim": 64, "rope_theta": NaN})").find("rope_theta must be finite, got nan"),
      std::string::npos);
  EXPECT_NE(message(R"({"head_dim": 64, "rope_theta": -Infinity})")
                .find("rope_theta must be finite, got -inf"),
            std::string::npos);
  EXPECT_NE(message(R"({"head_dim": 64, "rope_theta": 10000,
                        "rope_scaling": {"type": "linear", "factor": Infinity}})")
                .find("rope_scaling.factor must be finite, got inf"),
            std::string::npos);
  EXPECT_EQ(message(R"({"head_dim": 64, "rope_theta": 10000, "note": "NaN, Infinity"})"),
            "accepted");
  // Not a token of Python's either: still a parse error.
  EXPECT_NE(message(R"({"head_dim": 64, "rope_theta": nan})").find("not valid JSON"),
            std::string::npos);
}

TEST(RopeConfig, ValidateRejectsInconsistentStructs) {
  rope_config c;
  c.head_dim = 64;
  c.rotary_dim = 64;
  EXPECT_NO_THROW(rope_validate(c));
  auto b = c;
  b.rotary_dim = 66;
  EXPECT_THROW(rope_validate(b), invalid_argument);
  b = c;
  b.theta = 1.0;
  EXPECT_THROW(rope_validate(b), invalid_argument);
  b = c;
  b.type = rope_type::yarn;
  b.factor = 4;
  b.beta_fast = 1;  // must exceed beta_slow
  b.original_max_position_embeddings = 4096;
  EXPECT_THROW(rope_validate(b), invalid_argument);
  b = c;
  b.type = rope_type::dynamic;
  b.factor = 2;  // max_position_embeddings missing
  EXPECT_THROW(rope_validate(b), invalid_argument);
  b = c;
  b.type = rope_type::linear;
  b.factor = std::nan("");
  EXPECT_THROW(rope_validate(b), invalid_argument);
  EXPECT_THROW(rope_frequencies(c, -1), invalid_argument);
}

// Regression: "head_dim": 1000000000 was accepted and then sized a 5 * 10^8-entry frequency
// table (more than 10 s in posenc rope freqs). Every size read from a config is bounded.
TEST(RopeConfig, SizesAreBounded) {
  auto j = llama2_json();
  j["head_dim"] = 1000000000;
  EXPECT_NE(expect_invalid(j).find("head_dim must be in [2, 1048576], got 1000000000"),
            std::string::npos);
  j["head_dim"] = 1 << 20;  // the bound itself is accepted (without computing frequencies)
  std::vector<std::string> w;
  EXPECT_EQ(rope_config_from_json(j, &w).rotary_dim, 1 << 20);
  j = llama2_json();
  j["qk_rope_head_dim"] = int64_t{1} << 40;
  EXPECT_NE(expect_invalid(j).find("qk_rope_head_dim must be in [2, 1048576]"), std::string::npos);
  j = llama2_json();
  j["hidden_size"] = int64_t{1} << 50;  // derived head_dim 2^45
  EXPECT_NE(expect_invalid(j).find("head_dim must be in [2, 1048576]"), std::string::npos);
  j = llama2_json();
  j["max_position_embeddings"] = int64_t{1} << 60;
  EXPECT_NE(expect_invalid(j).find("max_position_embeddings must be in [0, 2^53]"),
            std::string::npos);
  j = llama2_json();
  j["original_max_position_embeddings"] = int64_t{1} << 54;
  EXPECT_NE(expect_invalid(j).find("original_max_position_embeddings must be in [0, 2^53]"),
            std::string::npos);
}

// Regression: transformers' Llama rotary class ignores partial_rotary_factor for rope_type
// default; posenc applied it to every model class.
TEST(RopeConfig, PartialRotaryFactorFollowsTheModelClass) {
  auto j = llama2_json();  // model_type llama, head_dim 128
  j["partial_rotary_factor"] = 0.5;
  std::vector<std::string> w;
  auto c = rope_config_from_json(j, &w);
  EXPECT_EQ(c.rotary_dim, 128);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("model_type llama: transformers' rotary class ignores "
                      "partial_rotary_factor = 0.5"),
            std::string::npos)
      << w[0];
  // A swept class measured to ignore it (Qwen2, tests/golden/transformers/variants.json's
  // probe): the whole head, with a note that says where that was measured.
  j["model_type"] = "qwen2";
  w.clear();
  EXPECT_EQ(rope_config_from_json(j, &w).rotary_dim, 128);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("model_type qwen2: transformers' rotary class ignores partial_rotary_factor "
                      "= 0.5 for rope_type default (GPT-NeoX and Phi-3 apply it; measured at "
                      "transformers c49429ed"),
            std::string::npos)
      << w[0];
  // The same config as a class that applies it (GPT-NeoX, Phi-3): R = 64, silently.
  for (const char* mt : {"gpt_neox", "phi3"}) {
    j["model_type"] = mt;
    w.clear();
    EXPECT_EQ(rope_config_from_json(j, &w).rotary_dim, 64) << mt;
    EXPECT_TRUE(w.empty()) << mt;
  }
  // Only architectures: LlamaForCausalLM is the Llama class.
  j.erase("model_type");
  j["architectures"] = nlohmann::json::array({"LlamaForCausalLM"});
  w.clear();
  EXPECT_EQ(rope_config_from_json(j, &w).rotary_dim, 128);
  EXPECT_EQ(w.size(), 1u);
  // A class posenc does not know: applied, with a warning that says so.
  j["architectures"] = nlohmann::json::array({"SomeNewForCausalLM"});
  w.clear();
  EXPECT_EQ(rope_config_from_json(j, &w).rotary_dim, 64);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("SomeNewForCausalLM"), std::string::npos);
  // No class named (explicit parameters): applied silently, as before.
  j.erase("architectures");
  w.clear();
  EXPECT_EQ(rope_config_from_json(j, &w).rotary_dim, 64);
  EXPECT_TRUE(w.empty());
  // Scaled types apply it in every class.
  j = llama2_json();
  j["partial_rotary_factor"] = 0.5;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  w.clear();
  EXPECT_EQ(rope_config_from_json(j, &w).rotary_dim, 64);
}

TEST(RopeConfig, HfLayoutByModelClass) {
  EXPECT_EQ(hf_rope_layout(llama2_json()), rope_layout::half);
  EXPECT_EQ(hf_rope_layout(nlohmann::json{{"model_type", "gptj"}}), rope_layout::interleaved);
  EXPECT_EQ(hf_rope_layout(nlohmann::json{{"head_dim", 64}}), std::nullopt);
}

// ---- Per-layer conventions (issue 15) ----
// Expected frequencies below are worked out by hand from the formulas: RoFormer (Su et al.
// 2021, eq. 34) omega_i = theta^(-2i/R); linear scaling divides by the factor; proportional
// uses the full head dim D in the exponent and 0 for the unrotated pairs. Exact powers of ten
// are chosen so that the values are known in closed form: 10000^(-1/2) = 0.01,
// 10^6^(-1/2) = 0.001, 10^6^(-1/8) = 10^(-3/4).

namespace {

rope_config load_layer(const std::string& name, const std::string& type,
                       std::vector<std::string>* w = nullptr) {
  std::vector<std::string> local;
  return rope_config_from_file(data(name), type, w ? w : &local);
}

std::string invalid_layer(const nlohmann::json& j, const std::string& type) {
  std::vector<std::string> w;
  try {
    rope_config_from_json(j, type, &w);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no invalid_argument for layer type " << type;
  return "";
}

// Relative error of a double pow against the closed form: a few ulp.
void expect_rel(double got, double want) {
  EXPECT_NEAR(got, want, 4e-16 * std::fabs(want));
}

}  // namespace

TEST(RopeLayers, Gemma3LegacyKeys) {
  // Sliding layers: rope_local_base_freq = 10^4, no scaling; D = R = 256.
  std::vector<std::string> w;
  auto s = load_layer("gemma3_1b_legacy.json", "sliding_attention", &w);
  EXPECT_EQ(s.type, rope_type::default_);
  EXPECT_EQ(s.theta, 1e4);
  auto fs = rope_frequencies(s);
  ASSERT_EQ(fs.inv_freq.size(), 128u);
  EXPECT_EQ(fs.inv_freq[0], 1.0);
  expect_rel(fs.inv_freq[64], 0.01);  // 10^4^(-128/256)
  // Full layers: rope_theta = 10^6 and rope_scaling linear x8.
  auto g = load_layer("gemma3_1b_legacy.json", "full_attention");
  EXPECT_EQ(g.type, rope_type::linear);
  EXPECT_EQ(g.theta, 1e6);
  EXPECT_EQ(g.factor, 8.0);
  auto fg = rope_frequencies(g);
  EXPECT_EQ(fg.inv_freq[0], 0.125);
  expect_rel(fg.inv_freq[64], 0.001 / 8);
  // Without a layer type the reader gives the full layers' config and says so.
  w.clear();
  auto plain = rope_config_from_file(data("gemma3_1b_legacy.json"), &w);
  EXPECT_EQ(plain.type, rope_type::linear);
  ASSERT_FALSE(w.empty());
  EXPECT_NE(w[0].find("rope_local_base_freq"), std::string::npos);
  // Layer types from sliding_window_pattern = 6: layers 5, 11, 17, 23 are global.
  auto plan = hf_layer_plan(nlohmann::json::parse(test::read_text(data("gemma3_1b_legacy.json"))));
  ASSERT_EQ(plan.layer_types.size(), 26u);
  for (size_t i = 0; i < 26; ++i)
    EXPECT_EQ(plan.layer_types[i], (i % 6 == 5) ? "full_attention" : "sliding_attention") << i;
  EXPECT_EQ(plan.types, (std::vector<std::string>{"sliding_attention", "full_attention"}));
  EXPECT_TRUE(plan.rope_layers.empty());
}

TEST(RopeLayers, NestedRopeParametersInTextConfig) {
  auto s = load_layer("gemma3_nested.json", "sliding_attention");
  auto g = load_layer("gemma3_nested.json", "full_attention");
  EXPECT_EQ(s.theta, 1e4);
  EXPECT_EQ(s.type, rope_type::default_);
  EXPECT_EQ(g.theta, 1e6);
  EXPECT_EQ(g.type, rope_type::linear);
  EXPECT_EQ(g.factor, 8.0);
  expect_rel(rope_frequencies(g).inv_freq[64], 0.001 / 8);
  auto j = nlohmann::json::parse(test::read_text(data("gemma3_nested.json")));
  auto plan = hf_layer_plan(j);
  EXPECT_EQ(plan.source, "layer_types");
  ASSERT_EQ(plan.layer_types.size(), 8u);
  EXPECT_EQ(plan.layer_types[5], "full_attention");
  // No layer type on a nested block: the error names the choices.
  std::vector<std::string> w;
  try {
    rope_config_from_json(j, &w);
    ADD_FAILURE() << "nested block read as one configuration";
  } catch (const invalid_argument& e) {
    // (nlohmann::json keeps object keys sorted, so the block names come alphabetically)
    EXPECT_NE(std::string(e.what()).find("choose a layer type (one of full_attention, "
                                         "sliding_attention"),
              std::string::npos)
        << e.what();
  }
  // An unknown layer type names the allowed values.
  EXPECT_NE(invalid_layer(j, "chunked_attention")
                .find("layer type must be one of sliding_attention, full_attention, got "
                      "'chunked_attention'"),
            std::string::npos);
  // Errors inside a block name the block.
  j["text_config"]["rope_parameters"]["full_attention"]["factor"] = 0.5;
  EXPECT_NE(invalid_layer(j, "full_attention").find("rope_parameters.full_attention.factor"),
            std::string::npos);
  // A config without layer types refuses any layer type.
  EXPECT_NE(invalid_layer(llama2_json(), "full_attention").find("no per-layer-type RoPE"),
            std::string::npos);
}

TEST(RopeLayers, ProportionalGemma4) {
  // Global layers: D = global_head_dim = 512, partial_rotary_factor 0.25 -> floor(0.25 * 512 / 2)
  // = 64 rotated pairs of 256; omega_i = (10^6)^(-2i/512) for i < 64, 0 after.
  auto g = load_layer("gemma4_proportional.json", "full_attention");
  EXPECT_EQ(g.type, rope_type::proportional);
  EXPECT_EQ(g.head_dim, 512);
  EXPECT_EQ(g.rotary_dim, 512);
  ASSERT_TRUE(g.rotated_pairs.has_value());
  EXPECT_EQ(*g.rotated_pairs, 64);
  auto f = rope_frequencies(g);
  ASSERT_EQ(f.inv_freq.size(), 256u);
  EXPECT_EQ(f.inv_freq[0], 1.0);
  expect_rel(f.inv_freq[32], std::pow(10.0, -0.75));  // 10^6^(-64/512)
  expect_rel(f.inv_freq[63], std::pow(10.0, -6.0 * 126.0 / 512.0));
  for (size_t i = 64; i < 256; ++i) EXPECT_EQ(f.inv_freq[i], 0.0) << i;
  // Sliding layers: D = 256, default.
  auto s = load_layer("gemma4_proportional.json", "sliding_attention");
  EXPECT_EQ(s.head_dim, 256);
  EXPECT_EQ(s.type, rope_type::default_);
  // The factor divides every rotated pair; D = 8, factor 2, 0.5 -> 2 rotated pairs of 4:
  // [1/2, 10^4^(-2/8)/2 = 0.1/2, 0, 0].
  nlohmann::json j = {{"head_dim", 8},
                      {"rope_parameters",
                       {{"rope_type", "proportional"},
                        {"rope_theta", 10000.0},
                        {"factor", 2.0},
                        {"partial_rotary_factor", 0.5}}}};
  std::vector<std::string> w;
  auto small = rope_frequencies(rope_config_from_json(j, &w));
  ASSERT_EQ(small.inv_freq.size(), 4u);
  EXPECT_EQ(small.inv_freq[0], 0.5);
  expect_rel(small.inv_freq[1], 0.05);
  EXPECT_EQ(small.inv_freq[2], 0.0);
  EXPECT_EQ(small.inv_freq[3], 0.0);
  // The float32 pipeline (transformers' float32 buffer) agrees to float rounding and keeps
  // the zeros exact.
  ASSERT_TRUE(small.hf.has_value());
  EXPECT_EQ(small.hf->inv_freq[0], 0.5f);
  EXPECT_NEAR(small.hf->inv_freq[1], 0.05f, 2e-8);
  EXPECT_EQ(small.hf->inv_freq[3], 0.0f);
  // Rotating with it leaves the unrotated channels bit-exact: x at pair 2 and 3 (half layout,
  // channels 2, 3, 6, 7) is unchanged; pair 0 at position 1 turns by 0.5 rad.
  std::vector<double> x = {1, 0, 0.25, -0.5, 0, 0, 0.75, 1.5};
  const std::vector<int64_t> pos = {1};
  auto y = x;
  rope_apply(small, rope_layout::half, rope_angle::exact, pos, y.data(), 1, 1, 8);
  for (int d : {2, 3, 6, 7}) EXPECT_EQ(y[d], x[d]) << d;
  EXPECT_NEAR(y[0], std::cos(0.5), 1e-15);
  EXPECT_NEAR(y[4], std::sin(0.5), 1e-15);
  // Odd head dims cannot be split into pairs.
  j["head_dim"] = 9;
  EXPECT_NE(expect_invalid(j).find("head_dim must be even for rope_type proportional"),
            std::string::npos);
}

TEST(RopeLayers, NopeLayersAndTemperatureTuning) {
  auto s = hf_layer_plan(nlohmann::json::parse(test::read_text(data("smollm3_nope.json"))));
  EXPECT_EQ(s.rope_layers, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_FALSE(s.temperature_tuning);
  // Llama 4 without a list: layer i is NoPE when (i + 1) % 4 == 0.
  auto j = nlohmann::json::parse(test::read_text(data("llama4_irope.json")));
  auto l = hf_layer_plan(j);
  ASSERT_EQ(l.rope_layers.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(l.rope_layers[i], (i + 1) % 4 != 0) << i;
  EXPECT_TRUE(l.temperature_tuning);
  EXPECT_EQ(l.floor_scale, 8192.0);
  EXPECT_EQ(l.attn_scale, 0.1);
  j["no_rope_layer_interval"] = 3;
  l = hf_layer_plan(j);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(l.rope_layers[i], (i + 1) % 3 != 0) << i;
  j["no_rope_layers"] = {1, 2};
  EXPECT_THROW(hf_layer_plan(j), invalid_argument);
}

// Full-attention layers without RoPE, read from the attention classes of transformers c49429ed:
// Cohere2Attention and Exaone4Attention apply apply_rotary_pos_emb only when the layer is sliding
// (Exaone4: or when the config has no sliding window at all). Expected values from that rule
// applied by hand to the layer types below, not from posenc.
TEST(RopeLayers, FullLayersOfCohere2AndExaone4HaveNoRope) {
  // Command R7B's shape: Cohere2Config's default pattern, every 4th layer full (layers 3, 7).
  nlohmann::json c = {{"model_type", "cohere2"},  {"hidden_size", 512},
                      {"num_attention_heads", 4}, {"num_hidden_layers", 8},
                      {"rope_theta", 50000.0},    {"sliding_window", 4096}};
  auto p = hf_layer_plan(c);
  ASSERT_EQ(p.layer_types.size(), 8u);
  EXPECT_EQ(p.rope_layers, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_NE(p.nope_source.find("Cohere2Attention"), std::string::npos) << p.nope_source;
  // Without sliding_window (the class default, 4096): the same.
  c.erase("sliding_window");
  EXPECT_EQ(hf_layer_plan(c).rope_layers, p.rope_layers);
  // sliding_window null: no layer has a window, so none rotates.
  c["sliding_window"] = nullptr;
  EXPECT_EQ(hf_layer_plan(c).rope_layers, std::vector<bool>(8, false));

  // EXAONE 4.0: layer_types as published (three sliding, one full).
  nlohmann::json e = {
      {"model_type", "exaone4"},
      {"hidden_size", 512},
      {"num_attention_heads", 4},
      {"num_hidden_layers", 4},
      {"rope_theta", 1000000.0},
      {"sliding_window", 4096},
      {"layer_types",
       {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"}}};
  EXPECT_EQ(hf_layer_plan(e).rope_layers, (std::vector<bool>{true, true, true, false}));
  // EXAONE 4.0 1.2B: no sliding window, every layer full and rotated.
  e["sliding_window"] = nullptr;
  e["layer_types"] = std::vector<std::string>(4, "full_attention");
  EXPECT_TRUE(hf_layer_plan(e).rope_layers.empty());
}

TEST(RopeLayers, MropeSectionsFromConfig) {
  std::vector<std::string> w;
  auto c = load("qwen2_vl_7b.json", &w);
  EXPECT_EQ(c.head_dim, 128);  // 3584 / 28
  EXPECT_EQ(c.type, rope_type::default_);
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(c.mrope_interleaved);
  // A section that does not split the 64 pairs: the error names the key and the sum.
  auto j = nlohmann::json::parse(test::read_text(data("qwen2_vl_7b.json")));
  j["rope_scaling"]["mrope_section"] = {16, 24, 20};
  EXPECT_NE(expect_invalid(j).find("rope_scaling.mrope_section must sum to rotary_dim / 2 = 64, "
                                   "got 16 + 24 + 20 = 60"),
            std::string::npos);
  j["rope_scaling"]["mrope_section"] = {24, 20, 20};
  j["rope_scaling"]["mrope_interleaved"] = true;
  auto i = rope_config_from_json(j, &w);
  EXPECT_TRUE(i.mrope_interleaved);
}

TEST(Mrope, ComponentsOfBothLayouts) {
  // Contiguous [2, 1, 1]: t t h w. Interleaved [2, 1, 1] over 4 pairs: t h w t.
  const std::vector<int64_t> s = {2, 1, 1};
  EXPECT_EQ(mrope_components(s, false, 4), (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(mrope_components(s, true, 4), (std::vector<int>{0, 1, 2, 0}));
  // Qwen3-VL's [24, 20, 20]: h at 1, 4, ..., 58, w at 2, 5, ..., 59, t elsewhere (60..63 too).
  const std::vector<int64_t> q3 = {24, 20, 20};
  const auto c = mrope_components(q3, true, 64);
  for (int i = 0; i < 64; ++i) {
    const int want = i < 60 ? i % 3 : 0;
    EXPECT_EQ(c[i], want) << i;
  }
  // An interleaved component that runs past the pairs.
  const std::vector<int64_t> bad = {0, 2, 2};
  EXPECT_THROW(mrope_components(bad, true, 4), invalid_argument);
  const std::vector<int64_t> two = {2, 2};
  EXPECT_THROW(mrope_components(two, false, 4), invalid_argument);
}

TEST(Mrope, EachPairTurnsByItsComponentsPosition) {
  // D = R = 8, theta 10^4: omega = 1, 0.1, 0.01, 0.001 (by hand). Contiguous [2, 1, 1]:
  // pairs 0, 1 at the temporal id, pair 2 at the height id, pair 3 at the width id.
  rope_config rc;
  rc.head_dim = 8;
  rc.rotary_dim = 8;
  rc.theta = 10000;
  const auto f = rope_frequencies(rc);
  const std::vector<int64_t> s = {2, 1, 1};
  const auto comp = mrope_components(s, false, 4);
  const std::vector<int64_t> pos = {3, 5, 7};  // (3, T = 1): t = 3, h = 5, w = 7
  const double omega[4] = {1, 0.1, 0.01, 0.001};
  const int64_t id[4] = {3, 3, 5, 7};
  for (auto layout : {rope_layout::half, rope_layout::interleaved}) {
    std::vector<double> x = {0.5, -1, 2, 0.25, 1.5, 0.75, -0.5, 1};
    auto y = x;
    mrope_apply(f, comp, layout, rope_angle::exact, pos, y.data(), 1, 1, 8);
    for (int i = 0; i < 4; ++i) {
      const int a = layout == rope_layout::half ? i : 2 * i;
      const int b = layout == rope_layout::half ? i + 4 : 2 * i + 1;
      const double th = static_cast<double>(id[i]) * omega[i];
      EXPECT_NEAR(y[a], x[a] * std::cos(th) - x[b] * std::sin(th), 1e-15) << i;
      EXPECT_NEAR(y[b], x[b] * std::cos(th) + x[a] * std::sin(th), 1e-15) << i;
    }
    // Inverse undoes it (a = 1).
    mrope_apply(f, comp, layout, rope_angle::exact, pos, y.data(), 1, 1, 8, true);
    for (int d = 0; d < 8; ++d) EXPECT_NEAR(y[d], x[d], 1e-15);
  }
  // A text token (equal ids) is rope_apply's rotation, bit for bit.
  std::vector<float> x(2 * 3 * 8);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>((k * 7) % 11) - 5.0f;
  auto a = x, b = x;
  const std::vector<int64_t> p1 = {4, 9}, p3 = {4, 9, 4, 9, 4, 9};
  rope_apply(f, rope_layout::half, rope_angle::hf_f32, p1, a.data(), 2, 3, 8);
  mrope_apply(f, comp, rope_layout::half, rope_angle::hf_f32, p3, b.data(), 2, 3, 8);
  EXPECT_EQ(a, b);
}

TEST(RopeLayers, Llama4EqualFreqFactors) {
  // Llama 4 Scout: llama3 scaling with low_freq_factor = high_freq_factor = 1, factor 16,
  // original 8192: wavelengths below 8192 kept, above divided by 16 (no band between).
  // theta 500000, D = 128: omega_i = 500000^(-2i/128), wavelength 2 pi / omega_i.
  auto c = load("llama4_irope.json");
  auto f = rope_frequencies(c);
  for (int i = 0; i < 64; ++i) {
    const double w = std::pow(500000.0, -2.0 * i / 128.0);
    const double want = 2 * M_PI / w > 8192 ? w / 16 : w;
    EXPECT_NEAR(f.inv_freq[i], want, 1e-15 * want) << i;
  }
  ASSERT_TRUE(f.hf.has_value());
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isfinite(f.hf->inv_freq[i])) << i;
}

// Hunyuan's NTK alpha (hunyuan_v1_dense, rope_scaling {"type": "dynamic", "alpha": 1000}):
// transformers' HunYuanDenseV1RotaryEmbedding sets base = rope_theta * alpha ** (dim / (dim - 2))
// and inv_freq = 1 / base ** (2i / dim), ignoring factor, up to max_position_embeddings; past it
// dynamic_rope_update recomputes plain dynamic NTK from rope_theta. Expected values from those
// formulas evaluated here with std::pow, not from posenc's frequency code.
TEST(RopeConfig, HunyuanAlphaSetsTheNtkBase) {
  const nlohmann::json cfg = {
      {"model_type", "hunyuan_v1_dense"},
      {"head_dim", 128},
      {"hidden_size", 4096},
      {"num_attention_heads", 32},
      {"rope_theta", 10000.0},
      {"max_position_embeddings", 32768},
      {"rope_scaling",
       {{"type", "dynamic"}, {"alpha", 1000.0}, {"factor", 1.0}, {"beta_fast", 32}}}};
  std::vector<std::string> w;
  const rope_config c = rope_config_from_json(cfg, &w);
  EXPECT_EQ(c.type, rope_type::dynamic);
  EXPECT_EQ(c.dynamic_alpha, 1000.0);
  for (const auto& m : w) EXPECT_EQ(m.find("alpha"), std::string::npos) << m;  // alpha is read
  const double alpha_base = 10000.0 * std::pow(1000.0, 128.0 / 126.0);
  for (const int64_t seq_len : {int64_t{0}, int64_t{1000}, int64_t{32768}}) {
    const auto f = rope_frequencies(c, seq_len);
    ASSERT_EQ(f.inv_freq.size(), 64u);
    for (size_t i = 0; i < 64; ++i) {
      const double want = 1.0 / std::pow(alpha_base, static_cast<double>(2 * i) / 128.0);
      EXPECT_NEAR(f.inv_freq[i], want, 4e-16 * want) << seq_len << " " << i;
    }
    EXPECT_EQ(f.attention_factor, 1.0);
  }
  // Past max_position_embeddings: plain dynamic NTK from rope_theta (factor 1: L / M).
  const double ntk_base = 10000.0 * std::pow(65536.0 / 32768.0, 128.0 / 126.0);
  const auto far = rope_frequencies(c, 65536);
  for (size_t i = 0; i < 64; ++i) {
    const double want = 1.0 / std::pow(ntk_base, static_cast<double>(2 * i) / 128.0);
    EXPECT_NEAR(far.inv_freq[i], want, 4e-16 * want) << i;
  }
  // Its float32 pipeline is the default one at that base (the class computes it so).
  rope_config plain;
  plain.head_dim = plain.rotary_dim = 128;
  plain.theta = alpha_base;
  const auto hf = rope_frequencies(c, 1000).hf, hf_plain = rope_frequencies(plain, 1000).hf;
  ASSERT_TRUE(hf && hf_plain);
  EXPECT_EQ(hf->inv_freq, hf_plain->inv_freq);
  // Written and read back the same.
  EXPECT_EQ(rope_config_from_json(rope_config_to_json(c), nullptr).dynamic_alpha, 1000.0);
  // Another class's dynamic NTK does not read alpha: said so, and the base is plain NTK.
  nlohmann::json llama = cfg;
  llama["model_type"] = "llama";
  w.clear();
  const rope_config l = rope_config_from_json(llama, &w);
  EXPECT_EQ(l.dynamic_alpha, 0.0);
  bool said = false;
  for (const auto& m : w) said = said || m.find("alpha is not used") != std::string::npos;
  EXPECT_TRUE(said);
}
