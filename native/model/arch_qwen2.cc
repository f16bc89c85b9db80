// Qwen2 / Qwen2.5 (Hugging Face Qwen2ForCausalLM; transformers models/qwen2/configuration_qwen2.py,
// modeling_qwen2.py): q/k/v_proj bias=True and o_proj bias=False with no config field, no q/k
// norm, head_dim = hidden_size / num_attention_heads (Qwen2Config has no head_dim).
#include "model/architecture.h"

namespace pg {

extern const ArchitectureSpec kQwen2Architecture = {
    "Qwen2ForCausalLM",
    "Qwen2Config",
    /*defaults: vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_pos*/ {151936, 4096, 22016, 32, 32, 32, 0, 32768},
    /*qk_norm=*/false,
    /*qkv_bias=*/{ArchitectureSpec::Bias::Always, nullptr},
    /*o_bias=*/{ArchitectureSpec::Bias::Never, nullptr},
    /*mlp_bias=*/{ArchitectureSpec::Bias::Never, nullptr},
    /*sliding_window_keys=*/true,
};

}  // namespace pg
