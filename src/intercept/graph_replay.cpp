#include "intercept/graph_replay.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <unordered_map>

#include "intercept/atomizer.hpp"
#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"

namespace lithos::intercept {

namespace {

// Whether the driver has the entry points a plan is built from.
bool can_plan(const DriverTable& d) noexcept {
  return d.cuGraphClone != nullptr && d.cuGraphDestroy != nullptr && d.cuGraphGetNodes != nullptr &&
         (d.cuGraphGetEdges_v2 != nullptr || d.cuGraphGetEdges != nullptr) && d.cuGraphNodeGetType != nullptr &&
         d.cuGraphKernelNodeGetParams != nullptr;
}

constexpr std::size_t kMaxNodes = 1U << 20;
constexpr int kMaxDepth = 16;

// Builds the steps of one graph (child graphs flattened); the reason it
// cannot be replayed otherwise.
class PlanBuilder {
 public:
  PlanBuilder(ReplayPlan* plan, Atomizer& atomizer) : api_(driver()), atomizer_(atomizer), plan_(plan) {}

  const char* add_graph(CUgraph g, int depth) {
    if (depth > kMaxDepth) return "child graphs nested too deep";
    size_t n = 0;
    if (api_.cuGraphGetNodes(g, nullptr, &n) != CUDA_SUCCESS) return "cuGraphGetNodes failed";
    if (n > kMaxNodes) return "too many nodes";
    std::vector<CUgraphNode> nodes(n);
    if (n > 0 && api_.cuGraphGetNodes(g, nodes.data(), &n) != CUDA_SUCCESS) return "cuGraphGetNodes failed";
    nodes.resize(n);
    std::vector<std::size_t> order;
    if (const char* why = topological(g, nodes, &order)) return why;
    for (const std::size_t i : order) {
      if (const char* why = add_node(nodes[i], depth)) return why;
    }
    return nullptr;
  }

 private:
  // Kahn's order of `nodes` (ties in the driver's node order).
  const char* topological(CUgraph g, const std::vector<CUgraphNode>& nodes, std::vector<std::size_t>* order) const {
    size_t m = 0;
    std::vector<CUgraphNode> from, to;
    if (api_.cuGraphGetEdges_v2 != nullptr) {
      if (api_.cuGraphGetEdges_v2(g, nullptr, nullptr, nullptr, &m) != CUDA_SUCCESS) return "cuGraphGetEdges failed";
      from.resize(m);
      to.resize(m);
      std::vector<CUgraphEdgeData> data(m);
      if (m > 0 && api_.cuGraphGetEdges_v2(g, from.data(), to.data(), data.data(), &m) != CUDA_SUCCESS)
        return "cuGraphGetEdges failed";
    } else {
      if (api_.cuGraphGetEdges(g, nullptr, nullptr, &m) != CUDA_SUCCESS) return "cuGraphGetEdges failed";
      from.resize(m);
      to.resize(m);
      if (m > 0 && api_.cuGraphGetEdges(g, from.data(), to.data(), &m) != CUDA_SUCCESS) return "cuGraphGetEdges failed";
    }
    from.resize(std::min<std::size_t>(m, from.size()));
    std::unordered_map<CUgraphNode, std::size_t> index;
    for (std::size_t i = 0; i < nodes.size(); ++i) index.emplace(nodes[i], i);
    std::vector<std::vector<std::size_t>> out(nodes.size());
    std::vector<std::size_t> indegree(nodes.size(), 0);
    for (std::size_t e = 0; e < from.size(); ++e) {
      const auto a = index.find(from[e]);
      const auto b = index.find(to[e]);
      if (a == index.end() || b == index.end()) return "an edge names a node the graph does not list";
      out[a->second].push_back(b->second);
      ++indegree[b->second];
    }
    std::deque<std::size_t> ready;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (indegree[i] == 0) ready.push_back(i);
    }
    while (!ready.empty()) {
      const std::size_t i = ready.front();
      ready.pop_front();
      order->push_back(i);
      for (const std::size_t j : out[i]) {
        if (--indegree[j] == 0) ready.push_back(j);
      }
    }
    if (order->size() != nodes.size()) return "the graph has a cycle";
    return nullptr;
  }

  const char* add_node(CUgraphNode node, int depth) {
    CUgraphNodeType type{};
    if (api_.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) return "cuGraphNodeGetType failed";
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: return add_kernel(node);
      case CU_GRAPH_NODE_TYPE_EMPTY: return nullptr;
      case CU_GRAPH_NODE_TYPE_MEMSET: {
        ReplayMemset s;
        if (api_.cuGraphMemsetNodeGetParams == nullptr || api_.cuGraphMemsetNodeGetParams(node, &s.p) != CUDA_SUCCESS)
          return "a memset node's parameters";
        if (s.p.elementSize != 1 && s.p.elementSize != 2 && s.p.elementSize != 4) return "a memset node's element size";
        plan_->steps.emplace_back(s);
        return nullptr;
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY: {
        ReplayMemcpy s;
        if (api_.cuGraphMemcpyNodeGetParams == nullptr || api_.cuGraphMemcpyNodeGetParams(node, &s.p) != CUDA_SUCCESS)
          return "a memcpy node's parameters";
        plan_->steps.emplace_back(s);
        return nullptr;
      }
      case CU_GRAPH_NODE_TYPE_HOST: {
        ReplayHost s;
        if (api_.cuGraphHostNodeGetParams == nullptr || api_.cuGraphHostNodeGetParams(node, &s.p) != CUDA_SUCCESS)
          return "a host node's parameters";
        plan_->steps.emplace_back(s);
        return nullptr;
      }
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD: {
        ReplayEventRecord s;
        if (api_.cuGraphEventRecordNodeGetEvent == nullptr ||
            api_.cuGraphEventRecordNodeGetEvent(node, &s.event) != CUDA_SUCCESS)
          return "an event-record node's event";
        plan_->steps.emplace_back(s);
        return nullptr;
      }
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
        ReplayEventWait s;
        if (api_.cuGraphEventWaitNodeGetEvent == nullptr ||
            api_.cuGraphEventWaitNodeGetEvent(node, &s.event) != CUDA_SUCCESS)
          return "an event-wait node's event";
        plan_->steps.emplace_back(s);
        return nullptr;
      }
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        CUgraph sub = nullptr;
        if (api_.cuGraphChildGraphNodeGetGraph == nullptr ||
            api_.cuGraphChildGraphNodeGetGraph(node, &sub) != CUDA_SUCCESS || sub == nullptr)
          return "a child graph node's graph";
        return add_graph(sub, depth + 1);
      }
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "a memory allocation node";
      case CU_GRAPH_NODE_TYPE_MEM_FREE: return "a memory free node";
      case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "a conditional node";
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "an external semaphore node";
      case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "a batch memory operation node";
      default: return "a node of an unknown type";
    }
  }

  const char* add_kernel(CUgraphNode node) {
    CUDA_KERNEL_NODE_PARAMS p{};
    if (api_.cuGraphKernelNodeGetParams(node, &p) != CUDA_SUCCESS) return "a kernel node's parameters";
    ReplayKernel k;
    k.function = p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(p.kern);
    if (k.function == nullptr) return "a kernel node without a function";
    k.config.gridDimX = p.gridDimX;
    k.config.gridDimY = p.gridDimY;
    k.config.gridDimZ = p.gridDimZ;
    k.config.blockDimX = p.blockDimX;
    k.config.blockDimY = p.blockDimY;
    k.config.blockDimZ = p.blockDimZ;
    k.config.sharedMemBytes = p.sharedMemBytes;
    k.params = p.kernelParams;
    k.extra = p.extra;
    if (api_.cuGraphKernelNodeGetAttribute != nullptr) {
      // The attributes that change what a launch does (not only how fast).
      CUkernelNodeAttrValue v{};
      if (api_.cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v) ==
              CUDA_SUCCESS &&
          v.deviceUpdatableKernelNode.deviceUpdatable != 0) {
        return "a kernel node updatable from the device";
      }
      v = {};
      if (api_.cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v) == CUDA_SUCCESS &&
          v.clusterDim.x * v.clusterDim.y * v.clusterDim.z > 1) {
        add_attr(&k, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, v);
      }
      v = {};
      if (api_.cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v) == CUDA_SUCCESS &&
          v.cooperative != 0)
        add_attr(&k, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, v);
      v = {};
      if (api_.cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, &v) ==
              CUDA_SUCCESS &&
          v.clusterSchedulingPolicyPreference != CU_CLUSTER_SCHEDULING_POLICY_DEFAULT) {
        add_attr(&k, CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, v);
      }
      v = {};
      if (api_.cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &v) == CUDA_SUCCESS &&
          v.memSyncDomain != CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT) {
        add_attr(&k, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, v);
      }
    }
    // A rewritten kernel's node carries its bounds after the application's
    // parameters: the whole grid (re-cut into atoms now), or one atom cut at
    // capture (kept as it is).
    if (const FunctionEntry* e = atomizer_.lookup(k.function)) {
      k.fixed_bounds = true;
      if (k.params != nullptr && k.params[e->patch->param_count] != nullptr) {
        std::uint32_t b[2] = {};
        std::memcpy(b, k.params[e->patch->param_count], sizeof b);
        const std::uint64_t blocks = static_cast<std::uint64_t>(p.gridDimX) * p.gridDimY * p.gridDimZ;
        k.fixed_bounds = !(b[0] == 0 && b[1] >= blocks);
      }
    }
    ++plan_->kernels;
    plan_->steps.emplace_back(k);
    return nullptr;
  }

  static void add_attr(ReplayKernel* k, CUlaunchAttributeID id, const CUkernelNodeAttrValue& v) {
    if (k->num_attrs >= std::size(k->attrs)) return;
    CUlaunchAttribute& a = k->attrs[k->num_attrs++];
    a.id = id;
    a.value = v;
  }

  const DriverTable& api_;
  Atomizer& atomizer_;
  ReplayPlan* plan_;
};

}  // namespace

ReplayPlan::~ReplayPlan() {
  const DriverTable& api = driver();
  if (done != nullptr && api.cuEventDestroy != nullptr) api.cuEventDestroy(done);
  if (clone != nullptr && api.cuGraphDestroy != nullptr) api.cuGraphDestroy(clone);
}

void GraphReplay::refuse(const char* reason) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    const bool first = refused_[reason]++ == 0;
    if (first) LITHOS_LOG(LogLevel::kInfo, "a best-effort CUDA graph is launched whole (one atom): %s", reason);
  } catch (...) {
  }
}

void GraphReplay::instantiated(CUgraphExec exec, CUgraph graph, unsigned long long flags) noexcept {
  if (!enabled_ || exec == nullptr || graph == nullptr) return;
  const DriverTable& api = driver();
  if (!can_plan(api)) {
    refuse("the driver lacks the graph inspection calls");
    return;
  }
  if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) != 0) {
    edited(exec);
    refuse("instantiated for device launch");
    return;
  }
  try {
    auto plan = std::make_shared<ReplayPlan>();
    if (api.cuGraphClone(&plan->clone, graph) != CUDA_SUCCESS || plan->clone == nullptr) {
      plan->clone = nullptr;
      edited(exec);
      refuse("cuGraphClone failed");
      return;
    }
    PlanBuilder b(plan.get(), atomizer_);
    if (const char* why = b.add_graph(plan->clone, 0)) {
      edited(exec);
      refuse(why);
      return;
    }
    if (api.cuEventCreate != nullptr && api.cuEventCreate(&plan->done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
      plan->done = nullptr;
    const std::lock_guard<std::mutex> lock(mu_);
    plans_[exec] = std::move(plan);
    ++built_;
  } catch (const std::exception& e) {
    edited(exec);
    refuse("out of memory");
  } catch (...) {
    edited(exec);
    refuse("out of memory");
  }
}

void GraphReplay::edited(CUgraphExec exec) noexcept {
  std::shared_ptr<ReplayPlan> old;
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(exec);
  if (it == plans_.end()) return;
  old = std::move(it->second);  // released after the lock (its clone is destroyed then)
  plans_.erase(it);
  ++edited_;
}

void GraphReplay::destroyed(CUgraphExec exec) noexcept {
  std::shared_ptr<ReplayPlan> old;
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(exec);
  if (it == plans_.end()) return;
  old = std::move(it->second);
  plans_.erase(it);
}

std::shared_ptr<ReplayPlan> GraphReplay::plan(CUgraphExec exec) noexcept {
  if (!enabled_) return nullptr;
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = plans_.find(exec);
  return it != plans_.end() ? it->second : nullptr;
}

void GraphReplay::count_replay(std::size_t steps) noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  ++replays_;
  steps_ += steps;
}

void GraphReplay::count_whole() noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  ++whole_;
}

std::string GraphReplay::stats_json() const {
  const std::lock_guard<std::mutex> lock(mu_);
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  std::string out = "{\"enabled\":" + std::string(enabled_ ? "true" : "false") + ",\"plans\":" + num(built_) +
                    ",\"edited\":" + num(edited_) + ",\"replays\":" + num(replays_) + ",\"steps\":" + num(steps_) +
                    ",\"whole\":" + num(whole_) + ",\"refused\":{";
  bool first = true;
  for (const auto& [why, n] : refused_) {
    out += (first ? "\"" : ",\"") + why + "\":" + num(n);
    first = false;
  }
  return out + "}}";
}

}  // namespace lithos::intercept
