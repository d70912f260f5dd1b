// Numbers in trainsim's text outputs (simulate's report, `trainsim diff`, plan's table): the
// printf-style formatting and the binary memory units, in one place so that every verb prints
// memory the same way (GiB = 2^30 bytes everywhere; docs/cli.md).
#pragma once

#include <string>

namespace trainsim {

/// Bytes per GiB (2^30).
inline constexpr double kBytesPerGiB = 1073741824.0;

/// `v` through the printf format `format`, which holds exactly one double conversion and at most
/// 63 characters of output: format_number("%.6f s", 0.5) = "0.500000 s".
std::string format_number(const char* format, double v);

/// Bytes in the largest binary unit they reach, two decimals: "49.18 GiB", "12.50 MiB",
/// "3.00 KiB", "512 B" (negative values by their magnitude: "-1.50 GiB").
std::string binary_bytes_text(double bytes);

/// Bytes in GiB with `decimals` decimals and no unit: gib_text(1.5 * 2^30, 1) = "1.5".
std::string gib_text(double bytes, int decimals);

}  // namespace trainsim
