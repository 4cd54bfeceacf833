// Shared by validate's files (validate_figures.cc, validate.cc, validate_history.cc, validate_gpu_health.cc,
// validate_placement.cc); not part of its interface.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report.h"
#include "validate.h"

namespace tb {

Figure MakeFigure(std::string key, std::string family, std::string title, std::string unit, Better better,
                  double value, Subject subject = {});

// A check judged within the run (no expectation layers): its figure, the expected value and tolerance it was judged
// by, where they came from, the verdict and the message.
Check SelfCheck(Figure figure, double expected, double tolerance, std::string source, Verdict verdict,
                std::string message);


// The point whose figures validate checks: the scaling point with the most ranks (a storage sweep's points are
// not scaling points), with its io group when the run had one.
struct HeadlinePoint {
  std::string name;  // "k8"
  const Group* train = nullptr;
  const Group* io = nullptr;
};
std::optional<HeadlinePoint> FindHeadlinePoint(const Report& report);

// "8 x NVIDIA H100 80GB HBM3", "2 x cpu": the devices of topology/ranks; "" without them.
std::string DeviceSummary(const Report& report);

// The gpu_health checks (validate_gpu_health.cc): one per GPU of gpu_health/devices, judged within the run; on a
// run on GPUs (backend nccl) an unknown check for each host without health data.
void AddGpuHealthChecks(const Report& report, std::vector<Check>& checks);

// The placement check (validate_placement.cc): environment.placement warns when ranks of a host must share CPUs
// (their recorded CPU affinities give some group of them fewer CPUs than ranks), passes when each can have one of its
// own, and is unknown for a report without the affinities.
void AddPlacementCheck(const Report& report, std::vector<Check>& checks);

}  // namespace tb
