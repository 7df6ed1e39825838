// Internal to the seam: the registry's storage, shared by the registry and the selector.
#pragma once

#include <mutex>
#include <string>
#include <vector>

class LlmBackendFactory;

namespace eliza::seam {

struct Registry {
    mutable std::mutex mutex;
    std::vector<LlmBackendFactory *> factories;  // registration order
    std::vector<LlmBackendFactory *> snapshot() const;
};

Registry & registry();
std::string lowercase(std::string s);

}  // namespace eliza::seam
