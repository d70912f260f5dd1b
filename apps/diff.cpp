// trainsim diff A.json B.json [--json F] (docs/cli.md): two summaries side by side
// (models/outputs/summary_diff.h).
#include <iostream>

#include "apps/output_file.h"
#include "apps/verbs.h"
#include "models/outputs/summary_diff.h"

namespace trainsim::cli {

int diff_main(const DiffArgs& args) {
  check_distinct_paths({{"A", args.a}, {"B", args.b}}, {{"--json", args.json}});
  const nlohmann::json a = read_summary_file(args.a);
  const nlohmann::json b = read_summary_file(args.b);
  const SummaryDiff d = diff_summaries(a, b);
  OutputFile json_out(args.json, "--json");
  if (json_out) json_out.stream() << diff_to_json(d).dump(2) << "\n";
  commit_all({&json_out});
  std::cout << format_text_diff(d);
  return 0;
}

}  // namespace trainsim::cli
