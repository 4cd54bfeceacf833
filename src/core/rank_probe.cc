#include "rank_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <sstream>
#include <thread>

#include "clock.h"
#include "error.h"
#include "mpi_util.h"

namespace tb {

namespace {

constexpr size_t kMaxLine = 4096;            // a request or an answer is one line, at most this long
constexpr size_t kConcurrentRequests = 256;  // sockets open at once while asking (well inside the fd limit)

// This host's IPv4 addresses, loopback last: where the other ranks can reach this rank's port.
std::vector<std::string> LocalAddresses() {
  std::vector<std::string> outside, loopback;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {"127.0.0.1"};
  for (const ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    ((a->ifa_flags & IFF_LOOPBACK) ? loopback : outside).push_back(text);
  }
  freeifaddrs(list);
  outside.insert(outside.end(), loopback.begin(), loopback.end());
  return outside;
}

std::string Pack(const RankProbe::Endpoint& e) {
  std::string packed = std::to_string(e.port);
  for (const std::string& a : e.addresses) packed += " " + a;
  return packed;
}

RankProbe::Endpoint Unpack(const std::string& packed) {
  RankProbe::Endpoint e;
  std::istringstream in(packed);
  in >> e.port;
  for (std::string a; in >> a;) e.addresses.push_back(a);
  return e;
}

std::string DrawToken() {
  std::random_device device;
  std::ostringstream token;
  for (int i = 0; i < 4; ++i) token << std::hex << device();
  return token.str();
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// One request to one endpoint, driven by poll: connect to each address in turn, send, read one line.
struct Exchange {
  const RankProbe::Endpoint* endpoint = nullptr;
  size_t address = 0;
  int fd = -1;
  bool sending = true;
  size_t sent = 0;
  std::string received;
  bool done = false;
  bool connected = false;  // a connection was made (the send began)
  std::optional<std::string> answer;

  // Opens a connection to the next address that takes one (or is still connecting); done when none is left.
  void Connect() {
    while (!done && address < endpoint->addresses.size()) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(static_cast<uint16_t>(endpoint->port));
      const bool parsed = inet_pton(AF_INET, endpoint->addresses[address].c_str(), &to.sin_addr) == 1;
      fd = parsed ? ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) : -1;
      if (fd >= 0 && (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 || errno == EINPROGRESS)) return;
      CloseFd(fd);
      ++address;
    }
    done = true;
  }
  void Retry() {
    CloseFd(fd);
    ++address;
    Connect();
  }
  void Finish(std::optional<std::string> line) {
    answer = std::move(line);
    CloseFd(fd);
    done = true;
  }
  // Acts on poll's events for this exchange's socket.
  void Progress(const std::string& request) {
    if (sending) {
      int error = 0;
      socklen_t length = sizeof error;
      if (sent == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0)) return Retry();
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN ? void() : (sent == 0 ? Retry() : Finish(std::nullopt));
      connected = true;
      sent += static_cast<size_t>(n);
      sending = sent < request.size();
      return;
    }
    char buffer[512];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) return Finish(std::nullopt);
    received.append(buffer, static_cast<size_t>(n));
    const size_t end = received.find('\n');
    if (end != std::string::npos) return Finish(received.substr(0, end));
    if (received.size() > kMaxLine) Finish(std::nullopt);
  }
};

// Sends `request` to each endpoint and reads one answer line from each, all at once (in batches), within deadline_s.
std::vector<ProbeAnswer> Ask(const std::vector<RankProbe::Endpoint>& endpoints, const std::string& request,
                             double deadline_s) {
  std::vector<Exchange> exchanges(endpoints.size());
  const double deadline = NowSeconds() + deadline_s;
  for (size_t first = 0; first < exchanges.size(); first += kConcurrentRequests) {
    const size_t last = std::min(exchanges.size(), first + kConcurrentRequests);
    const size_t batches_left = (exchanges.size() - first + kConcurrentRequests - 1) / kConcurrentRequests;
    const double batch_deadline = NowSeconds() + (deadline - NowSeconds()) / static_cast<double>(batches_left);
    for (size_t i = first; i < last; ++i) {
      exchanges[i].endpoint = &endpoints[i];
      exchanges[i].Connect();
    }
    while (true) {
      std::vector<pollfd> fds;
      std::vector<Exchange*> owners;
      for (size_t i = first; i < last; ++i) {
        if (exchanges[i].done) continue;
        fds.push_back({exchanges[i].fd, static_cast<short>(exchanges[i].sending ? POLLOUT : POLLIN), 0});
        owners.push_back(&exchanges[i]);
      }
      const double left_s = batch_deadline - NowSeconds();
      if (fds.empty() || left_s <= 0) break;
      if (::poll(fds.data(), fds.size(), static_cast<int>(left_s * 1000) + 1) < 0 && errno != EINTR) break;
      for (size_t k = 0; k < fds.size(); ++k) {
        if (fds[k].revents) owners[k]->Progress(request);
      }
    }
    for (size_t i = first; i < last; ++i) {
      if (!exchanges[i].done) exchanges[i].Finish(std::nullopt);
    }
  }
  std::vector<ProbeAnswer> answers;
  for (Exchange& e : exchanges) answers.push_back({std::move(e.answer), e.connected});
  return answers;
}

// Reads one line from a connected socket, waiting at most timeout_s in all; "" when none came.
std::string ReadLine(int fd, double timeout_s) {
  std::string line;
  const double deadline = NowSeconds() + timeout_s;
  while (line.find('\n') == std::string::npos && line.size() <= kMaxLine) {
    const double left_s = deadline - NowSeconds();
    pollfd p{fd, POLLIN, 0};
    if (left_s <= 0 || ::poll(&p, 1, static_cast<int>(left_s * 1000) + 1) <= 0) return "";
    char buffer[512];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return "";
    line.append(buffer, static_cast<size_t>(n));
  }
  const size_t end = line.find('\n');
  return end == std::string::npos ? "" : line.substr(0, end);
}

void SendAll(int fd, const std::string& text) {
  for (size_t sent = 0; sent < text.size();) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the asker has gone: nothing to do about it
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

// The listening port and the thread that answers on it.
class RankProbe::Server {
 public:
  Server(std::string token, Answer answer, OnPeerTimeout on_peer_timeout)
      : token_(std::move(token)), answer_(std::move(answer)), on_peer_timeout_(std::move(on_peer_timeout)) {}
  ~Server() {
    if (wake_[1] >= 0) {
      const char stop = 's';
      [[maybe_unused]] ssize_t n = ::write(wake_[1], &stop, 1);
    }
    if (thread_.joinable()) thread_.join();
    CloseFd(listen_fd_);
    CloseFd(wake_[0]);
    CloseFd(wake_[1]);
  }

  // Opens the port on every address; the port, or 0 when it cannot.
  int Open() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t length = sizeof any;
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
        ::listen(listen_fd_, 128) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&any), &length) != 0 ||
        ::pipe2(wake_, O_CLOEXEC) != 0) {
      CloseFd(listen_fd_);
      return 0;
    }
    thread_ = std::thread([this] { Serve(); });
    return ntohs(any.sin_port);
  }

 private:
  void Serve() {
    while (true) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents) return;
      if (!(fds[0].revents & POLLIN)) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Handle(fd);
    }
  }

  // One request: "<token> state" is answered with this rank's state; "<token> timeout <rank> <operation>" is
  // acknowledged, and then handed to OnPeerTimeout (which normally ends the job).
  void Handle(int fd) {
    constexpr double kRequestTimeout_s = 2;
    const std::string line = ReadLine(fd, kRequestTimeout_s);
    std::istringstream in(line);
    std::string token, kind;
    in >> token >> kind;
    if (token_.empty() || token != token_) {
      CloseFd(fd);
      return;
    }
    if (kind == "state") {
      SendAll(fd, answer_() + "\n");
      CloseFd(fd);
      return;
    }
    int rank = -1;
    in >> rank;
    std::string operation;
    std::getline(in >> std::ws, operation);
    SendAll(fd, "ok\n");
    CloseFd(fd);
    if (kind == "timeout" && on_peer_timeout_) on_peer_timeout_(rank, operation);
  }

  std::string token_;
  Answer answer_;
  OnPeerTimeout on_peer_timeout_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

RankProbe::RankProbe(MPI_Comm comm, Answer answer, OnPeerTimeout on_peer_timeout, double reach_deadline_s) {
  TB_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  if (rank_ == 0) token_ = DrawToken();
  BroadcastString(comm, token_, 0);
  answer_ = answer;
  server_ = std::make_unique<Server>(token_, std::move(answer), std::move(on_peer_timeout));
  Endpoint mine;
  mine.port = server_->Open();
  if (mine.port) mine.addresses = LocalAddresses();
  std::string root = Pack(mine);
  BroadcastString(comm, root, 0);
  const std::vector<std::string> all = GatherStrings(comm, Pack(mine), 0);  // empty on other ranks
  if (rank_ == 0) {
    for (const std::string& packed : all) endpoints_.push_back(Unpack(packed));
    for (const ProbeAnswer& answer : AskAll(reach_deadline_s)) reachable_.push_back(answer.line.has_value());
  } else {
    endpoints_.push_back(Unpack(root));
  }
  TB_CHECK_MPI(MPI_Barrier(comm));  // rank 0's check of reach sees each rank as it is when the probe is set up
}

RankProbe::~RankProbe() = default;

std::vector<ProbeAnswer> RankProbe::AskAll(double deadline_s) const {
  if (rank_ != 0) return {};
  // Rank 0 answers for itself here: its probe thread may be the one asking (a peer's timeout), or busy.
  std::vector<Endpoint> others = endpoints_;
  others[0].addresses.clear();
  std::vector<ProbeAnswer> answers = Ask(others, token_ + " state\n", deadline_s);
  answers[0] = {answer_(), true};
  return answers;
}

bool RankProbe::TellRoot(const std::string& operation, double deadline_s) const {
  std::string flat = operation;
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  const std::string request = token_ + " timeout " + std::to_string(rank_) + " " + flat + "\n";
  const std::vector<ProbeAnswer> answer = Ask({endpoints_.at(0)}, request, deadline_s);
  return answer[0].line && *answer[0].line == "ok";
}

}  // namespace tb
