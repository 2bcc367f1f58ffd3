// Running GPU work that may never finish in a forked child with a watchdog.
//
// A launch whose enabled mask slots are all dead hangs forever and only
// killing the process frees the GPU context. So lithos's own GPU tools do
// such work in a child process: the parent never initialises CUDA, waits for
// the child's answer until a deadline, and kills it (SIGKILL) if it is late.
// The child also arms alarm() as a second line of defence.
#pragma once

#include <functional>
#include <string>

#include "common/status.hpp"

namespace lithos::gpu {

// Forks; the child runs `work` and sends its Result back through a pipe, then
// _exit()s. Returns the child's Result, or kUnavailable "watchdog: ..." when
// the child did not answer within `timeout_s` seconds (it is then killed), or
// died (signal, crash). `what` names the work in messages.
// Call it only from a process that has not initialised CUDA (fork after
// cuInit is unsupported) and flush stdio before (the child inherits buffers;
// it leaves with _exit, so they are not flushed twice).
Result<std::string> run_in_child(const std::function<Result<std::string>()>& work, double timeout_s,
                                 const std::string& what);

}  // namespace lithos::gpu
