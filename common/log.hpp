// The one logging header: a thin layer over spdlog.
//
// LS_TRACE compiles out unless SPDLOG_ACTIVE_LEVEL is lowered at build time,
// so trace calls cost nothing on hot paths (the notifier, per-layer handlers).
#pragma once

#ifndef SPDLOG_ACTIVE_LEVEL
#define SPDLOG_ACTIVE_LEVEL SPDLOG_LEVEL_DEBUG
#endif

#include <string>

#include <spdlog/spdlog.h>

namespace layerstream::log {

/// Sets the global level from a name: trace, debug, info, warn, error, off.
/// Returns false (and leaves the level alone) for an unknown name.
bool set_level(const std::string& name);

} // namespace layerstream::log

#define LS_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define LS_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LS_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define LS_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define LS_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
