#include "model/architecture.h"

namespace pg {

// The registry: one entry per architecture, its row in model/arch_<name>.cc.
#define PG_ARCHITECTURES(X) X(kQwen3Architecture) X(kQwen2Architecture) X(kLlamaArchitecture)

#define PG_DECLARE(row) extern const ArchitectureSpec row;
PG_ARCHITECTURES(PG_DECLARE)
#undef PG_DECLARE

namespace {
#define PG_ENTRY(row) &row,
const ArchitectureSpec* const kArchitectures[] = {PG_ARCHITECTURES(PG_ENTRY)};
#undef PG_ENTRY
}  // namespace

const ArchitectureSpec* FindArchitecture(const std::string& name) {
  for (const ArchitectureSpec* a : kArchitectures)
    if (name == a->name) return a;
  return nullptr;
}

std::string ArchitectureNames() {
  std::string out;
  const size_t n = sizeof kArchitectures / sizeof kArchitectures[0];
  for (size_t i = 0; i < n; ++i) out += (i == 0 ? "" : i + 1 == n ? " and " : ", ") + std::string(kArchitectures[i]->name);
  return out;
}

}  // namespace pg
