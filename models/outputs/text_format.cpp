#include "models/outputs/text_format.h"

#include <cstdio>

namespace trainsim {

std::string format_number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string binary_bytes_text(double bytes) {
  const double a = bytes < 0 ? -bytes : bytes;
  if (a >= kBytesPerGiB) return format_number("%.2f GiB", bytes / kBytesPerGiB);
  if (a >= 1024.0 * 1024) return format_number("%.2f MiB", bytes / (1024.0 * 1024));
  if (a >= 1024.0) return format_number("%.2f KiB", bytes / 1024.0);
  return format_number("%.0f B", bytes);
}

std::string gib_text(double bytes, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, bytes / kBytesPerGiB);
  return buf;
}

}  // namespace trainsim
