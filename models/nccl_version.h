// The NCCL releases whose tuning model trainsim follows (scenario key `nccl_version`,
// docs/scenario.md; the model itself is models/perf/nccl_model.h). A bottom header: the
// scenario (models/input/) names a release without depending on the performance models.
#pragma once

#include <optional>
#include <string>

namespace trainsim {

/// The NCCL release whose tuning model is followed (scenario key `nccl_version`).
enum class NcclVersion { V2_18_5, V2_29_7 };
constexpr NcclVersion kDefaultNcclVersion = NcclVersion::V2_29_7;
/// Every modelled release, in enum order (the scenario key's and the benchmarks' choices).
constexpr NcclVersion kNcclVersions[] = {NcclVersion::V2_18_5, NcclVersion::V2_29_7};

/// "2.18.5", "2.29.7".
inline const char* to_string(NcclVersion v) {
  return v == NcclVersion::V2_18_5 ? "2.18.5" : "2.29.7";
}

/// The release `name` names as to_string writes it; nullopt for any other text.
inline std::optional<NcclVersion> nccl_version_from_string(const std::string& name) {
  for (NcclVersion v : kNcclVersions)
    if (name == to_string(v)) return v;
  return std::nullopt;
}

}  // namespace trainsim
