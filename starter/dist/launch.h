// Starting the ranks of a distributed run, three ways:
//
//  1. The kit starts them itself (`run_data_parallel --world-size 2`): the program serves
//     the rendezvous (RendezvousServer) and starts world_size copies of itself
//     (Process), each with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set.
//  2. srun starts them: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID give the ranks.
//  3. torchrun (or anything setting RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
//
// detect_world() tells a program which case it is in. A Process is a fresh process
// (fork, then exec of this program), never a bare fork: a forked copy of a process
// that has already run multi-threaded OpenMP code hangs in libgomp. Workers die with
// the process that started them (PR_SET_PDEATHSIG), so nothing is left behind.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kit {

// Where the workers meet.
struct Rendezvous {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// How this process was started.
struct WorldInfo {
  enum class Launcher { None, Kit, Torchrun, Slurm };
  Launcher launcher = Launcher::None;  // None: not a worker, start the workers yourself
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  Rendezvous rendezvous;
  bool is_worker() const { return launcher != Launcher::None; }
  std::string launcher_name() const;  // "kit", "torchrun", "srun" or "none"
};

// Reads the environment: RANK + WORLD_SIZE (the kit's own workers and torchrun), else
// SLURM_PROCID + SLURM_NTASKS inside an srun step, else not a worker. Under srun,
// MASTER_ADDR defaults to the first host of the step's node list (127.0.0.1 on one
// node) and MASTER_PORT to 20000 + SLURM_JOB_ID % 20000, so all tasks of a job agree.
// Throws kit::Error for inconsistent or malformed values.
WorldInfo detect_world();

// "gpu[003-004,007],cpu1" -> "gpu003": the first host of a SLURM node list.
std::string first_slurm_host(const std::string& nodelist);

// The port to use: `flag_port` when the user gave one (> 0), else MASTER_PORT when set,
// else 0 (a free port). kit::Error for a value outside 0..65535.
int choose_port(int flag_port);

// Serves the rendezvous store for workers started by this process. Port 0 picks a free
// port, so concurrent runs never collide. A port already taken is a kit::Error naming it.
// The store lives as long as this object.
class RendezvousServer {
 public:
  explicit RendezvousServer(int port = 0, std::string addr = "127.0.0.1");
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  const Rendezvous& rendezvous() const { return rdzv_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Rendezvous rdzv_;
};

// What a Process runs. Default: this very program (/proc/self/exe) with its own
// arguments. `env` entries are added to (or replace) the inherited environment.
// `output`: when set, stdout and stderr go to this file instead of the terminal.
struct Command {
  std::vector<std::string> argv;  // empty: this program's own command line
  std::vector<std::pair<std::string, std::string>> env;
  std::string output;
};
Command this_program();

// One child process, in the spirit of Python's multiprocessing.Process.
class Process {
 public:
  // Worker `rank` of `world_size`: this program again, told its rank and the rendezvous
  // through RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
  Process(int rank, int world_size, const Rendezvous& rdzv);
  // Any command (tests use this to run the kit's programs).
  explicit Process(Command cmd, int rank = 0);

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // a child still running is killed and reaped: no orphans

  void start();  // fork + exec; kit::Error when that fails or when started twice
  void join();   // waits until the child has exited
  // Waits at most `timeout`; true when the child has exited.
  bool join_for(std::chrono::milliseconds timeout);
  bool poll();   // true when the child has exited (never blocks)
  void kill(int signal = 9);  // SIGKILL by default; no-op once it has exited

  bool started() const { return pid_ > 0; }
  bool running();             // started and not yet exited
  // nullopt while running; then the exit status, or -N when killed by signal N
  // (the convention of Python's Process.exitcode).
  std::optional<int> exitcode() const { return exitcode_; }
  std::string describe_exit() const;  // "exited with status 1", "was killed by signal 9 (Killed)"
  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }

 private:
  void reap(int status);
  Command cmd_;
  bool self_ = false;  // exec this program through /proc/self/exe
  int rank_ = 0;
  pid_t pid_ = -1;
  std::optional<int> exitcode_;
};

// Waits for all processes. When one fails (non-zero exit or a signal), stops the others
// (SIGKILL), reaps them, and throws kit::Error naming the rank that failed first and how
// it ended; ranks that only lost a peer (exit status dist::kExitPeerLost) are named after
// it. Returns normally only when every process exited with status 0.
void join_all(std::vector<Process>& procs);

}  // namespace kit
