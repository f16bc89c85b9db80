// Model-integrated loss steps (sequence logprobs, OPSD and GRPO backward into LoRA grads).
// Filled in once native/model lands; until then registers nothing.
#include "napi/util.h"

namespace pg {
void RegisterModelSteps(Napi::Env env, Napi::Object exports) {}
}  // namespace pg
