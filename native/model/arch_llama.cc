// Llama 3.x (Hugging Face LlamaForCausalLM; transformers models/llama/configuration_llama.py,
// modeling_llama.py): q/k/v/o bias with attention_bias, gate/up/down bias with mlp_bias, no q/k
// norm, kv heads = heads and head_dim = hidden_size / heads when absent.
#include "model/architecture.h"

namespace pg {

extern const ArchitectureSpec kLlamaArchitecture = {
    "LlamaForCausalLM",
    "LlamaConfig",
    /*defaults: vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_pos*/ {32000, 4096, 11008, 32, 32, 0, 0, 2048},
    /*qk_norm=*/false,
    /*qkv_bias=*/{ArchitectureSpec::Bias::Field, "attention_bias"},
    /*o_bias=*/{ArchitectureSpec::Bias::Field, "attention_bias"},
    /*mlp_bias=*/{ArchitectureSpec::Bias::Field, "mlp_bias"},
    /*sliding_window_keys=*/false,
};

}  // namespace pg
