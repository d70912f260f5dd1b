// models/outputs/text_format.h: the numbers of the text outputs, checked against values
// written out by hand (2^30 bytes = 1 GiB).
#include "models/outputs/text_format.h"

#include <gtest/gtest.h>

namespace trainsim {
namespace {

TEST(TextFormat, BinaryUnitsAtTheirThresholds) {
  EXPECT_EQ(binary_bytes_text(512), "512 B");
  EXPECT_EQ(binary_bytes_text(1023), "1023 B");
  EXPECT_EQ(binary_bytes_text(3 * 1024), "3.00 KiB");
  EXPECT_EQ(binary_bytes_text(12.5 * 1024 * 1024), "12.50 MiB");
  EXPECT_EQ(binary_bytes_text(1073741824.0), "1.00 GiB");
  EXPECT_EQ(binary_bytes_text(-1.5 * 1073741824.0), "-1.50 GiB");
}

TEST(TextFormat, GibColumnAndPrintfFormats) {
  EXPECT_EQ(gib_text(1.5 * 1073741824.0, 1), "1.5");
  EXPECT_EQ(gib_text(80e9, 1), "74.5");  // 80e9 / 2^30 = 74.505...
  EXPECT_EQ(gib_text(80e9, 2), "74.51");
  EXPECT_EQ(format_number("%.6f s", 0.5), "0.500000 s");
  EXPECT_EQ(format_number("%+.1f%%", 12.34), "+12.3%");
}

}  // namespace
}  // namespace trainsim
