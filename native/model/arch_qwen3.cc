// Qwen3 dense (Hugging Face Qwen3ForCausalLM; transformers models/qwen3/configuration_qwen3.py,
// modeling_qwen3.py): q/k RMSNorm per head, q/k/v/o bias with attention_bias, no MLP bias.
#include "model/architecture.h"

namespace pg {

extern const ArchitectureSpec kQwen3Architecture = {
    "Qwen3ForCausalLM",
    "Qwen3Config",
    /*defaults: vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_pos*/ {151936, 4096, 22016, 32, 32, 32, 128, 32768},
    /*qk_norm=*/true,
    /*qkv_bias=*/{ArchitectureSpec::Bias::Field, "attention_bias"},
    /*o_bias=*/{ArchitectureSpec::Bias::Field, "attention_bias"},
    /*mlp_bias=*/{ArchitectureSpec::Bias::Never, nullptr},
    /*sliding_window_keys=*/true,
};

}  // namespace pg
