#include "phase.h"

#include "console.h"
#include "injecting_communicator.h"
#include "injection.h"
#include "log.h"

namespace tb {

int RunPhaseCommand(const CommandInput& input, Phase& phase) {
  CommonOptions common;
  std::vector<std::string> inject;
  bool emulate_pcie = false;
  po::options_description options(phase.name() + " options");
  phase.AddOptions(options);
  AddEmulatePcieOption(options, &emulate_pcie);
  AddInjectOption(options, &inject);
  AddCommonOptions(options, common);
  InjectionPlan faults;
  std::unique_ptr<CommandRun> run = StartCommand(phase.name(), input, options, phase.usage(), common,
                                                 [&](CommandRun& r) {
                                                   faults = r.PlanInjection(inject);
                                                   r.EmulatePcie(emulate_pcie);  // before any communicator
                                                   phase.Configure(r, faults);
                                                 },
                                                 phase.Rules());
  // The one expensive check runs last, once every flag is known to be good.
  AgreeOnSetup([&] { phase.Verify(*run); });
  run->StopIfSignalledBeforeMeasurement();
  std::unique_ptr<Communicator> comm = WithInjectedFaults(run->MakeCommunicator(), faults);
  return run->RecordingFailures([&] {
    run->BeginMeasurement(phase.activity());
    const PhaseResult result = phase.Measure(*run, *comm);
    if (!result.failure.empty() && !result.interrupted) {
      run->RecordGpuHealth();
      run->WriteReportNow("failed", result.failure);
      if (input.ctx.world_rank == 0) ErrorLine(result.failure, false);
      return static_cast<int>(ExitCode::kRuntime);
    }
    return run->Finish(result.interrupted);
  });
}

}  // namespace tb
