// The factory registry, the default optional session methods, and the bundle probe behind
// every gate's can_serve().
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

std::string serving_names(const char * bundle_dir) {
    std::string names;
    for (LlmBackendFactory * f : registry().snapshot()) {
        if (f->can_serve(bundle_dir)) names += (names.empty() ? "" : ", ") + std::string(f->name());
    }
    return names;
}

void clear_registry_for_tests() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().factories.clear();
}

namespace {

// One directory's entries, ending at the first error (a vanished or unreadable directory
// serves nothing; no exception leaves a can_serve()).
bool any_entry_with_suffix(const fs::path & dir, const std::string & suffix) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
            return true;
        }
    }
    return false;
}

}  // namespace

bool bundle_has_artifact(const char * bundle_dir, const char * pattern) noexcept {
    if (bundle_dir == nullptr || pattern == nullptr) {
        return false;
    }
    try {
        const std::string p = pattern;
        const fs::path root(bundle_dir);
        std::error_code ec;
        const size_t wild = p.find_first_of("*?");
        if (wild == std::string::npos) {
            return !p.empty() && p.back() == '/' ? fs::is_directory(root / p.substr(0, p.size() - 1), ec)
                                                 : fs::is_regular_file(root / p, ec);
        }
        // "<dir>/*<suffix>": one '*' opening the last component and nothing else wild.
        const size_t slash = p.rfind('/');
        const std::string suffix = p.substr(wild + 1);
        if (p[wild] != '*' || wild != (slash == std::string::npos ? 0 : slash + 1) || suffix.empty() ||
            suffix.find_first_of("*?/") != std::string::npos) {
            return false;
        }
        return any_entry_with_suffix(root / p.substr(0, wild), suffix);
    } catch (...) {  // bad_alloc: a probe that cannot run serves nothing
        return false;
    }
}

}  // namespace eliza::seam

bool eliza::backends::GateFactory::can_serve(const char * bundle_dir) const {
    for (size_t i = 0; i < spec_.n_artifacts; ++i) {
        if (loads_artifact(spec_.artifacts[i]) && eliza::seam::bundle_has_artifact(bundle_dir, spec_.artifacts[i])) {
            return true;
        }
    }
    return false;
}

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
