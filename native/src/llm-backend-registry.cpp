// The factory registry, the default optional session methods, and bundle probes shared by
// the backends' can_serve().
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "llm-backend-registry.h"
#include "llm-backend.h"
#include "status.h"

namespace fs = std::filesystem;

int LlmBackendSession::save_slot(const char * /*filename*/, char ** out_error) {
    return eliza::fail(out_error, ELIZA_ERR_INVALID_ARG, "this backend does not support slot files");
}

int LlmBackendSession::restore_slot(const char * /*filename*/, char ** out_error) {
    return eliza::fail(out_error, ELIZA_ERR_INVALID_ARG, "this backend does not support slot files");
}

namespace eliza::seam {

std::string lowercase(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

Registry & registry() {
    static Registry instance;
    return instance;
}

std::vector<LlmBackendFactory *> Registry::snapshot() const {
    std::lock_guard<std::mutex> lock(mutex);
    return factories;
}

std::string registered_names() {
    std::string names;
    for (LlmBackendFactory * f : registry().snapshot()) {
        names += (names.empty() ? "" : ", ") + std::string(f->name());
    }
    return names;
}

void clear_registry_for_tests() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().factories.clear();
}

bool bundle_text_has_suffix(const char * bundle_dir, const std::string & suffix, bool want_directory) {
    if (bundle_dir == nullptr) {
        return false;
    }
    std::error_code ec;
    const fs::path text = fs::path(bundle_dir) / "text";
    if (!fs::is_directory(text, ec)) {
        return false;
    }
    for (const auto & entry : fs::directory_iterator(text, ec)) {
        const std::string name = entry.path().filename().string();
        const bool matches = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
        if (matches && (!want_directory || entry.is_directory(ec))) {
            return true;
        }
    }
    return false;
}

}  // namespace eliza::seam

bool llm_backend_register(LlmBackendFactory * factory) {
    if (factory == nullptr || factory->name() == nullptr) {
        return false;
    }
    auto & reg = eliza::seam::registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    const std::string wanted = eliza::seam::lowercase(factory->name());
    for (LlmBackendFactory * existing : reg.factories) {
        if (eliza::seam::lowercase(existing->name()) == wanted) {
            return false;
        }
    }
    reg.factories.push_back(factory);
    return true;
}
