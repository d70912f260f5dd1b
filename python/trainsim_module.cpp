// The Python module `trainsim` (docs/python.md): simulate, plan, load_scenario and import_hf
// from a notebook or a script. It links models/ and sim/ only (no LibTorch), and starts nothing
// at import: SimGrid runs in a forked child per simulation (sim/isolate.h), so the module can
// simulate any number of times. Simulations release the GIL, so a ThreadPoolExecutor runs a
// sweep in parallel, one child process per running simulation.
//
// Errors: trainsim::InputError (models/errors.h) becomes trainsim.InputError (a ValueError)
// with the message and, where the message names them, its file, line, field and value
// (parse_input_error). SystemError and InvariantError become RuntimeError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "models/errors.h"
#include "models/input/hf_config.h"
#include "models/input/reader.h"
#include "models/input/scenario.h"
#include "models/run.h"
#include "sim/executor.h"

extern char** environ;

namespace py = pybind11;
using json = nlohmann::json;

namespace {

/// Where a dict scenario or config is said to come from in messages.
constexpr const char* kDictSource = "<dict>";

// ---- Python values <-> YAML / JSON

/// A Python scalar as the YAML scalar a scenario file would hold.
std::string scalar_text(const py::handle& v) {
  if (v.is_none()) return "null";
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(v)) return py::str(v).cast<std::string>();
  if (py::isinstance<py::float_>(v)) return py::repr(v).cast<std::string>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  throw trainsim::InputError(std::string(kDictSource) + ": a value of Python type '" +
                             py::str(py::type::of(v).attr("__name__")).cast<std::string>() +
                             "' (" + py::repr(v).cast<std::string>() +
                             "): expected a dict, list, str, int, float, bool or None");
}

YAML::Node to_yaml(const py::handle& v) {
  if (py::isinstance<py::dict>(v)) {
    YAML::Node n(YAML::NodeType::Map);
    for (auto item : v.cast<py::dict>()) n[py::str(item.first).cast<std::string>()] = to_yaml(item.second);
    return n;
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (auto item : v) n.push_back(to_yaml(item));
    return n;
  }
  if (v.is_none()) return YAML::Node(YAML::NodeType::Null);
  YAML::Node n(scalar_text(v));
  // A Python str stays a string even where it reads as a number ("8"): quoted.
  if (py::isinstance<py::str>(v)) n.SetTag("!");
  return n;
}

std::string emit(const YAML::Node& n) {
  YAML::Emitter out;
  out.SetFloatPrecision(17);
  out.SetDoublePrecision(17);
  out << n;
  return std::string(out.c_str()) + "\n";
}

/// A YAML scalar as Python: quoted -> str; null, bool, int, float as YAML 1.2's core schema
/// reads them; anything else a str.
py::object scalar_value(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return py::str(s);
  if (s == "null" || s == "~" || s == "Null" || s == "NULL") return py::none();
  if (s == "true" || s == "True" || s == "TRUE") return py::bool_(true);
  if (s == "false" || s == "False" || s == "FALSE") return py::bool_(false);
  if (!s.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0' && errno == 0) return py::int_(i);
    const double d = std::strtod(s.c_str(), &end);
    if (*end == '\0' && s.find_first_of("0123456789") != std::string::npos) return py::float_(d);
  }
  return py::str(s);
}

py::object from_yaml(const YAML::Node& n) {
  if (n.IsMap()) {
    py::dict d;
    for (const auto& kv : n) d[py::str(kv.first.Scalar())] = from_yaml(kv.second);
    return std::move(d);
  }
  if (n.IsSequence()) {
    py::list l;
    for (const auto& x : n) l.append(from_yaml(x));
    return std::move(l);
  }
  if (n.IsScalar()) return scalar_value(n);
  return py::none();
}

py::object from_json(const json& j) {
  switch (j.type()) {
    case json::value_t::object: {
      py::dict d;
      for (const auto& [k, v] : j.items()) d[py::str(k)] = from_json(v);
      return std::move(d);
    }
    case json::value_t::array: {
      py::list l;
      for (const auto& v : j) l.append(from_json(v));
      return std::move(l);
    }
    case json::value_t::string: return py::str(j.get<std::string>());
    case json::value_t::boolean: return py::bool_(j.get<bool>());
    case json::value_t::number_integer: return py::int_(j.get<std::int64_t>());
    case json::value_t::number_unsigned: return py::int_(j.get<std::uint64_t>());
    case json::value_t::number_float: return py::float_(j.get<double>());
    default: return py::none();
  }
}

/// `overrides` as `--set` pairs: {"parallel.micro_batch_size": 2} (or a list of pairs), each
/// value a YAML value (a list in flow style).
std::vector<std::pair<std::string, std::string>> to_overrides(const py::object& overrides) {
  std::vector<std::pair<std::string, std::string>> out;
  if (overrides.is_none()) return out;
  auto add = [&](const py::handle& k, const py::handle& v) {
    if (!py::isinstance<py::str>(k))
      throw trainsim::InputError("overrides: a key must be a str, got " +
                                 py::repr(k).cast<std::string>());
    std::string text;
    if (py::isinstance<py::dict>(v) || py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      YAML::Emitter e;
      e << YAML::Flow << to_yaml(v);
      text = e.c_str();
    } else {
      text = scalar_text(v);
    }
    out.emplace_back(k.cast<std::string>(), text);
  };
  if (py::isinstance<py::dict>(overrides)) {
    for (auto item : overrides.cast<py::dict>()) add(item.first, item.second);
  } else {
    for (auto item : overrides) {
      auto pair = item.cast<py::tuple>();
      if (pair.size() != 2) throw trainsim::InputError("overrides: expected (key, value) pairs");
      add(pair[0], pair[1]);
    }
  }
  return out;
}

/// A scenario argument: a path (str or os.PathLike) or a dict. A dict's relative
/// cluster.system_file and model.hf_config are relative to the current directory.
struct ScenarioSource {
  std::string path;  ///< the file, or kDictSource
  std::string text;  ///< a dict's YAML text; empty for a file
};

ScenarioSource scenario_source(const py::object& scenario) {
  if (py::isinstance<py::dict>(scenario)) {
    YAML::Node root = to_yaml(scenario);
    for (const char* section : {"model", "cluster"}) {
      const char* key = std::strcmp(section, "model") == 0 ? "hf_config" : "system_file";
      if (root[section].IsMap() && root[section][key].IsScalar() &&
          std::filesystem::path(root[section][key].Scalar()).is_relative())
        root[section][key] = std::filesystem::absolute(root[section][key].Scalar()).string();
    }
    return {kDictSource, emit(root)};
  }
  return {py::str(scenario).cast<std::string>(), ""};
}

// ---- trainsim.InputError

py::object g_input_error;  // the Python class, set at import

struct InputErrorParts {
  std::string file, line, field, value;
};

/// The file, line, field and value an InputError's message names. The messages follow
/// models/errors.h: "FILE[:LINE[:COL]]: field 'FIELD' = VALUE: WHY", "FILE: unknown key 'K'…",
/// "FILE: field 'F': expected X, got V", "FILE: missing (required) field 'F'"; a part the
/// message does not name stays empty (None in Python).
InputErrorParts parse_input_error(const std::string& msg) {
  InputErrorParts p;
  // "FILE", "FILE:LINE", "FILE:LINE:COL", "FILE (--set KEY=VALUE)" before ": ".
  static const std::regex head(R"(^(\S+?)(?: \([^)]*\))?(?::(\d+))?(?::\d+)?: )");
  std::smatch m;
  if (std::regex_search(msg, m, head)) {
    p.file = m[1].str();
    p.line = m[2].str();
  }
  static const std::regex field(R"((?:field|key|option) '([^']+)'(?: = (.*?)(?=: |$))?)");
  if (std::regex_search(msg, m, field)) {
    p.field = m[1].str();
    p.value = m[2].str();
  } else {
    // Validation messages: "parallel.x (3) is not ...", "model.y = 5 ...": the first dotted key
    // the message names (its subject) and its value; a rule between two keys ("A (16) is not
    // divisible by B (3)") names both in the message.
    static const std::regex dotted(
        R"(\b([a-z_]+(?:\.[a-z_0-9]+)+)\b(?: \(([^)\s]*)\)| (?:=|of) ([^\s:,;]+))?)");
    for (auto it = std::sregex_iterator(msg.begin(), msg.end(), dotted);
         it != std::sregex_iterator(); ++it) {
      if (it->position(0) < static_cast<std::ptrdiff_t>(p.file.size())) continue;
      p.field = (*it)[1].str();
      p.value = (*it)[2].matched ? (*it)[2].str() : (*it)[3].str();
      break;
    }
  }
  // A value shown quoted ('-3', "x") is the text between the quotes.
  if (p.value.size() >= 2 && (p.value.front() == '\'' || p.value.front() == '"') &&
      p.value.back() == p.value.front())
    p.value = p.value.substr(1, p.value.size() - 2);
  if (p.value.empty()) {
    static const std::regex got(R"(got ([^\s;,]+(?: \w+)?))");
    if (std::regex_search(msg, m, got)) p.value = m[1].str();
  }
  return p;
}

/// Sets trainsim.InputError as the pending Python exception.
void set_input_error(const std::string& msg) {
  const InputErrorParts p = parse_input_error(msg);
  auto opt = [](const std::string& s) -> py::object {
    return s.empty() ? py::none() : py::object(py::str(s));
  };
  py::object err = g_input_error(msg);
  err.attr("file") = opt(p.file);
  err.attr("line") = p.line.empty() ? py::none() : py::object(py::int_(std::stoll(p.line)));
  err.attr("field") = opt(p.field);
  err.attr("value") = opt(p.value);
  PyErr_SetObject(g_input_error.ptr(), err.ptr());
}

[[noreturn]] void raise_input_error(const std::string& msg) {
  set_input_error(msg);
  throw py::error_already_set();
}

/// Runs `body` without the GIL; an InputError comes back as its message (raised by the caller
/// once the GIL is held again).
template <typename F>
void without_gil(F&& body, std::string& input_error) {
  py::gil_scoped_release release;
  try {
    body();
  } catch (const trainsim::InputError& e) {
    input_error = e.what();
  }
}

// ---- simulate

struct SimulateResult {
  json summary;
  json trace;
  std::vector<std::string> warnings;
  std::vector<std::vector<std::pair<std::string, double>>> memory_rows;
  std::vector<std::string> memory_devices;
};

void collect_memory(const trainsim::MemoryTimeline& timeline,
                    const std::vector<trainsim::RankId>& ranks, SimulateResult& r) {
  auto rows = [&](const char* device, std::int64_t id, const trainsim::MemorySeries& s) {
    s.for_each_step(timeline.start_s, [&](double t, const trainsim::MemVector& v) {
      std::vector<std::pair<std::string, double>> row{{"time_s", t}, {"id", double(id)}};
      for (int c = 0; c < trainsim::kNumMemCategories; ++c)
        row.emplace_back(trainsim::to_string(static_cast<trainsim::MemCategory>(c)), double(v[c]));
      row.emplace_back("total", double(trainsim::total_bytes(v)));
      r.memory_rows.push_back(std::move(row));
      r.memory_devices.emplace_back(device);
    });
  };
  std::vector<std::int64_t> nodes;
  for (trainsim::RankId rank : ranks) {
    rows("gpu", rank, timeline.gpu_of(rank));
    nodes.push_back(rank / timeline.gpus_per_node);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (std::int64_t node : nodes) rows("host", node, timeline.host(node));
}

SimulateResult run_simulation(const trainsim::RunRequest& req, bool trace, bool memory,
                              const std::string& trace_ranks) {
  SimulateResult r;
  const trainsim::PreparedRun run = trainsim::prepare_run(req);
  r.warnings = run.warnings;
  const trainsim::ExecutionRecord record = trainsim::sim::simulate(
      run.graph, run.scenario, run.system, run.cost_model(), trainsim::sim::SimOptions{});
  trainsim::FinishOptions finish;
  finish.trace_ranks = trace_ranks;
  const trainsim::RunOutputs out = trainsim::finish_run(run, record, finish);
  r.summary = trainsim::summary_to_json(out.summary);
  if (trace) {
    std::ostringstream os;
    const trainsim::CostModel cost = run.cost_model();
    trainsim::write_chrome_trace(
        os, run.graph, record, out.memory, out.selection,
        trainsim::TraceInfo{run.scenario->name, run.scenario->cluster.gpus_per_node, &cost});
    r.trace = json::parse(os.str());
  }
  if (memory) collect_memory(out.memory, out.selection.ranks, r);
  return r;
}

py::dict simulate(const py::object& scenario, const py::object& overrides,
                  const py::object& calibration, bool trace, bool memory_timeline,
                  const std::string& trace_ranks, bool force) {
  trainsim::RunRequest req;
  const ScenarioSource src = scenario_source(scenario);
  req.scenario_path = src.path;
  req.scenario_text = src.text;
  req.overrides = to_overrides(overrides);
  if (!calibration.is_none()) req.calibration_path = py::str(calibration).cast<std::string>();
  req.force = force;
  SimulateResult r;
  std::string input_error;
  without_gil([&] { r = run_simulation(req, trace, memory_timeline, trace_ranks); }, input_error);
  if (!input_error.empty()) raise_input_error(input_error);
  py::module_ warnings = py::module_::import("warnings");
  for (const std::string& w : r.warnings) warnings.attr("warn")(py::str("trainsim: " + w));
  py::dict d = from_json(r.summary).cast<py::dict>();
  if (trace) d["trace"] = from_json(r.trace);
  if (memory_timeline) {
    py::list rows;
    for (std::size_t i = 0; i < r.memory_rows.size(); ++i) {
      py::dict row;
      row["device"] = r.memory_devices[i];
      for (const auto& [k, v] : r.memory_rows[i]) {
        if (k == "time_s")
          row[py::str(k)] = v;
        else
          row[py::str(k)] = py::int_(static_cast<std::int64_t>(v));
      }
      rows.append(row);
    }
    d["memory_timeline"] = rows;
  }
  return d;
}

// ---- plan: the `trainsim plan` program (its worker processes and Ctrl-C handling stay out of
// the Python process), results read back from its --json file.

std::string cli_path() {
  if (const char* env = std::getenv("TRAINSIM_CLI"); env && *env) return env;
  return TRAINSIM_CLI_PATH;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "trainsim-py-XXXXXX").string();
    if (!::mkdtemp(templ.data()))
      throw trainsim::SystemError("trainsim: mkdtemp() failed: " + std::string(std::strerror(errno)));
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs the CLI with `args`, stdout discarded, stderr captured; returns (exit status, stderr).
std::pair<int, std::string> run_cli(const std::vector<std::string>& args, const TempDir& dir) {
  const std::string exe = cli_path();
  const std::string err_path = (dir.path / "stderr.txt").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw trainsim::SystemError("trainsim.plan: cannot run " + exe + " (set TRAINSIM_CLI to the "
                                "trainsim program): " + std::strerror(rc));
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) throw trainsim::SystemError("trainsim.plan: waitpid() failed");
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return {code, slurp(err_path)};
}

py::list plan(const py::object& scenario, const py::object& overrides, const py::object& top,
              const py::object& jobs, const py::object& calibration, bool force) {
  const ScenarioSource src = scenario_source(scenario);
  const auto sets = to_overrides(overrides);
  TempDir dir;
  std::string path = src.path;
  if (!src.text.empty()) {
    path = (dir.path / "scenario.yaml").string();
    std::ofstream(path) << src.text;
  }
  std::vector<std::string> args{"plan", path, "--json", (dir.path / "plan.json").string()};
  for (const auto& [k, v] : sets) args.insert(args.end(), {"--set", k + "=" + v});
  if (!top.is_none()) args.insert(args.end(), {"--top", py::str(top).cast<std::string>()});
  if (!jobs.is_none()) args.insert(args.end(), {"--jobs", py::str(jobs).cast<std::string>()});
  if (!calibration.is_none())
    args.insert(args.end(), {"--calibration", py::str(calibration).cast<std::string>()});
  if (force) args.emplace_back("--force");
  std::pair<int, std::string> status;
  {
    py::gil_scoped_release release;
    status = run_cli(args, dir);
  }
  auto [code, err] = status;
  if (code != 0) {
    std::string msg = err;
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    if (const auto nl = msg.rfind('\n'); nl != std::string::npos) msg = msg.substr(nl + 1);
    if (msg.rfind("trainsim: ", 0) == 0) msg = msg.substr(10);
    if (!src.text.empty())
      for (std::size_t at; (at = msg.find(path)) != std::string::npos;) msg.replace(at, path.size(), kDictSource);
    if (code == 1 && msg.rfind("error: ", 0) != 0) raise_input_error(msg);
    throw std::runtime_error("trainsim plan exited with status " + std::to_string(code) + ": " + msg);
  }
  const json result = json::parse(slurp(dir.path / "plan.json"));
  return from_json(result.at("candidates")).cast<py::list>();
}

// ---- load_scenario, import_hf

py::dict load_scenario(const py::object& scenario, const py::object& overrides) {
  const ScenarioSource src = scenario_source(scenario);
  const auto sets = to_overrides(overrides);
  std::string text;
  std::string input_error;
  without_gil(
      [&] {
        // Validated as simulate validates it (same messages), then returned as written.
        (void)trainsim::validated(src.text.empty() ? trainsim::load_scenario(src.path, sets)
                                                   : trainsim::parse_scenario(src.text, src.path, sets));
        if (src.text.empty()) {
          text = trainsim::scenario_text_with_overrides(src.path, sets);
        } else {
          YAML::Node root = trainsim::input::load_yaml_document(src.text, src.path);
          for (const auto& [k, v] : sets) trainsim::input::apply_override(root, k, v, src.path);
          text = emit(root);
        }
      },
      input_error);
  if (!input_error.empty()) raise_input_error(input_error);
  return from_yaml(YAML::Load(text)).cast<py::dict>();
}

py::dict import_hf(const py::object& config) {
  TempDir dir;
  std::string path;
  if (py::isinstance<py::dict>(config)) {
    path = (dir.path / "config.json").string();
    py::module_ pyjson = py::module_::import("json");
    std::ofstream(path) << pyjson.attr("dumps")(config).cast<std::string>();
  } else {
    path = py::str(config).cast<std::string>();
  }
  std::vector<std::pair<std::string, std::string>> keys;
  std::string input_error;
  without_gil([&] { keys = trainsim::import_hf_config(path); }, input_error);
  if (!input_error.empty()) {
    if (py::isinstance<py::dict>(config))
      for (std::size_t at; (at = input_error.find(path)) != std::string::npos;)
        input_error.replace(at, path.size(), kDictSource);
    raise_input_error(input_error);
  }
  py::dict d;
  for (const auto& [k, v] : keys) d[py::str(k)] = from_yaml(YAML::Load(v));
  return d;
}

}  // namespace

PYBIND11_MODULE(trainsim, m) {
  m.doc() = "trainsim: simulate one training iteration of a Megatron-LM / DeepSpeed scenario "
            "(docs/python.md)";
  g_input_error = py::reinterpret_borrow<py::object>(
      PyErr_NewExceptionWithDoc("trainsim.InputError",
                                "A user error (scenario, override, file): attributes file, line, "
                                "field and value (None where the message names none).",
                                PyExc_ValueError, nullptr));
  m.attr("InputError") = g_input_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const trainsim::InputError& e) {
      set_input_error(e.what());
    }
  });
  m.def("simulate", &simulate, py::arg("scenario"), py::arg("overrides") = py::dict(),
        py::arg("calibration") = py::none(), py::arg("trace") = false,
        py::arg("memory_timeline") = false, py::arg("trace_ranks") = "",
        py::arg("force") = false,
        "Simulates one iteration; returns the summary as a dict (docs/summary.md), with "
        "'trace' (Chrome trace JSON) and 'memory_timeline' (list of rows) when asked.");
  m.def("plan", &plan, py::arg("scenario"), py::arg("overrides") = py::dict(),
        py::arg("top") = py::none(), py::arg("jobs") = py::none(),
        py::arg("calibration") = py::none(), py::arg("force") = false,
        "Searches the parallel layouts (docs/plan.md); returns the ranked candidates.");
  m.def("load_scenario", &load_scenario, py::arg("scenario"), py::arg("overrides") = py::dict(),
        "Validates a scenario (file or dict) and returns it as a dict, overrides applied.");
  m.def("import_hf", &import_hf, py::arg("config"),
        "A Hugging Face config.json (path or dict) as the scenario's model: keys.");
}
