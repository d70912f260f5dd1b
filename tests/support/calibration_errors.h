// The refusal check of the calibration-profile tests (models/hardware/calibration.h
// parse_calibration): a bad profile text must be refused naming the file, the field and the
// value.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "models/errors.h"
#include "models/hardware/calibration.h"

namespace trainsim::test_support {

/// Expects parse_calibration(`text`, "bad.json") to throw an InputError whose message names
/// "bad.json", `field` and `value`.
inline void expect_profile_refused(const std::string& text, const std::string& field,
                                   const std::string& value) {
  try {
    parse_calibration(text, "bad.json");
    ADD_FAILURE() << "expected InputError for " << field;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
    EXPECT_NE(msg.find(value), std::string::npos) << msg;
  }
}

}  // namespace trainsim::test_support
