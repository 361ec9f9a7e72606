#include "residency_layout.h"

#include <algorithm>
#include <functional>
#include <map>
#include <limits>

namespace autovm::rt {
namespace {

bool share_a_step(const std::vector<StepRange>& a, const std::vector<StepRange>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].second < b[j].first) {
      ++i;
    } else if (b[j].second < a[i].first) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}

bool overlap_in_space(int64_t a, int64_t a_bytes, int64_t b, int64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

// The waits of contract "Ordering" for the given offsets.
std::vector<std::vector<TensorId>> prefetch_waits(const Plan& plan,
                                                  const std::vector<int64_t>& offset) {
  const StepIndex n = plan.step_count();
  // Evictions whose range is free from step p + 1, by p (index n: none; -1 maps to slot 0 with
  // the persistent tensors moved to the host before the training step).
  std::vector<std::vector<TensorId>> freed_after(static_cast<size_t>(n) + 1);
  for (const Action& a : plan.actions)
    if (a.kind == AUTOVM_ACTION_EVICT && a.ready_before_step <= n)
      freed_after[static_cast<size_t>(a.ready_before_step)].push_back(a.tensor);
  for (const Tensor& t : plan.tensors)
    if (t.starts_on_host) freed_after[0].push_back(t.id);
  std::vector<std::vector<TensorId>> waits(plan.actions.size());
  for (size_t i = 0; i < plan.actions.size(); ++i) {
    const Action& a = plan.actions[i];
    if (a.kind != AUTOVM_ACTION_PREFETCH) continue;
    const Tensor& b = plan.tensors[static_cast<size_t>(a.tensor)];
    for (TensorId other : freed_after[static_cast<size_t>(a.after_step + 1)]) {
      const Tensor& o = plan.tensors[static_cast<size_t>(other)];
      if (other != b.id && o.bytes > 0 && b.bytes > 0 &&
          overlap_in_space(offset[static_cast<size_t>(other)], o.bytes,
                           offset[static_cast<size_t>(b.id)], b.bytes))
        waits[i].push_back(other);
    }
  }
  return waits;
}

}  // namespace

std::vector<std::vector<StepRange>> occupancy(const Plan& plan, bool remote_in_place) {
  const StepIndex n = plan.step_count();
  std::vector<std::vector<size_t>> by_tensor(plan.tensors.size());
  for (size_t i = 0; i < plan.actions.size(); ++i) {
    const Action& a = plan.actions[i];
    if (a.kind != AUTOVM_ACTION_ADVISE && (a.kind != AUTOVM_ACTION_READ_REMOTE || remote_in_place) &&
        !is_chain_temporary(a, plan.tensors[static_cast<size_t>(a.tensor)]))
      by_tensor[static_cast<size_t>(a.tensor)].push_back(i);
  }
  std::vector<std::vector<StepRange>> on(plan.tensors.size());
  for (const Tensor& t : plan.tensors) {
    auto& list = by_tensor[static_cast<size_t>(t.id)];
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return issue_point(plan.actions[a]) < issue_point(plan.actions[b]);
    });
    auto& ranges = on[static_cast<size_t>(t.id)];
    std::vector<StepIndex> remote;  // steps that read it remotely, in its own range
    // Before step 0 (-1) every persistent tensor is on the device: the trainer may write them.
    bool is_open = true;
    StepIndex open = t.persistent ? -1 : t.first;
    auto close = [&](StepIndex last) {
      if (is_open && last >= open) {
        if (!ranges.empty() && ranges.back().second + 1 >= open)
          ranges.back().second = std::max(ranges.back().second, last);
        else
          ranges.emplace_back(open, last);
      }
      is_open = false;
    };
    auto reopen = [&](StepIndex first) {
      is_open = true;
      open = first;
    };
    if (t.starts_on_host) close(-1);  // moved to the host at the first step_begin(0)
    for (size_t i : list) {
      const Action& a = plan.actions[i];
      switch (a.kind) {
        case AUTOVM_ACTION_EVICT: close(a.ready_before_step - 1); break;
        case AUTOVM_ACTION_DISCARD: close(a.after_step); break;
        case AUTOVM_ACTION_PREFETCH: reopen(a.after_step + 1); break;
        case AUTOVM_ACTION_RECOMPUTE: reopen(a.ready_before_step); break;
        case AUTOVM_ACTION_READ_REMOTE: remote.push_back(a.ready_before_step); break;
        case AUTOVM_ACTION_ADVISE: break;
      }
    }
    close(t.persistent ? n - 1 : t.last);
    if (remote.empty()) continue;
    for (StepIndex s : remote) ranges.emplace_back(s, s);
    std::sort(ranges.begin(), ranges.end());
    size_t kept = 0;  // merge what overlaps or touches
    for (const StepRange& r : ranges) {
      if (kept > 0 && ranges[kept - 1].second + 1 >= r.first) {
        ranges[kept - 1].second = std::max(ranges[kept - 1].second, r.second);
      } else {
        ranges[kept++] = r;
      }
    }
    ranges.resize(kept);
  }
  return on;
}

ResidencyLayout pack_by_residency(const Plan& plan, int64_t alignment, bool remote_in_place) {
  ResidencyLayout layout;
  const size_t count = plan.tensors.size();
  for (const Tensor& t : plan.tensors) layout.offset.push_back(t.offset);
  layout.arena_bytes = plan.arena_bytes;
  layout.temporary_offset.assign(plan.actions.size(), kNoTemporary);
  layout.temporary_bytes = plan.temporary_bytes;
  for (size_t i = 0; i < plan.actions.size(); ++i)
    layout.temporary_offset[i] = plan.actions[i].temporary_offset;
  if (count <= kMaxPackedTensors) {
    // What to place: every tensor over its ranges on the device, and every chain temporary over
    // its one step (an action; a tensor named twice before one step is one item).
    struct Item {
      int64_t bytes = 0;
      std::vector<StepRange> on;
      int64_t steps = 0;  // moments on the device (two a step)
    };
    std::vector<Item> items;
    for (auto& ranges : occupancy(plan, remote_in_place))
      items.push_back(Item{0, std::move(ranges), 0});
    // Time in points: step s is the moment before it (2s), where chain temporaries are, then s
    // itself (2s + 1). A tensor its first step allocates as it starts is not there at the first.
    for (const Tensor& t : plan.tensors) {
      Item& item = items[static_cast<size_t>(t.id)];
      item.bytes = t.bytes;
      const bool allocated = allocated_by_its_step(plan, t);
      for (StepRange& r : item.on)
        r = {2 * r.first + (allocated && r.first == t.first ? 1 : 0), 2 * r.second + 1};
    }
    std::map<std::pair<StepIndex, TensorId>, size_t> temporary_item;
    std::vector<size_t> item_of_action(plan.actions.size(), 0);
    for (size_t i = 0; i < plan.actions.size(); ++i) {
      const Action& a = plan.actions[i];
      if (a.temporary_offset == kNoTemporary) continue;
      auto [it, fresh] = temporary_item.emplace(std::make_pair(a.ready_before_step, a.tensor), items.size());
      if (fresh)
        items.push_back(Item{plan.tensors[static_cast<size_t>(a.tensor)].bytes,
                             {{2 * a.ready_before_step, 2 * a.ready_before_step}}, 0});
      item_of_action[i] = it->second;
    }
    std::vector<int64_t> change(2 * static_cast<size_t>(plan.step_count()) + 3, 0);  // from point -2
    // Items on the device at every step (from -1 to the last) share a step with everything: they
    // go first, one after the other, and the rest are fitted above them.
    std::vector<size_t> ids;
    std::vector<int64_t> offset(items.size(), 0), best_offset;
    int64_t base = 0;
    const StepRange always{-2, 2 * plan.step_count() - 1};  // steps -1 to n - 1
    for (size_t i = 0; i < items.size(); ++i) {
      for (const auto& [first, last] : items[i].on) {
        change[static_cast<size_t>(first + 2)] += items[i].bytes;
        change[static_cast<size_t>(last + 3)] -= items[i].bytes;
        items[i].steps += last - first + 1;
      }
      if (items[i].on.empty() || items[i].bytes == 0) continue;
      if (items[i].on.size() == 1 && items[i].on.front() == always) {
        offset[i] = base;
        base = (base + items[i].bytes + alignment - 1) / alignment * alignment;
      } else {
        ids.push_back(i);
      }
    }
    int64_t live = 0;
    for (int64_t c : change) layout.peak_bytes = std::max(layout.peak_bytes, live += c);

    // Fit in a given order: first fit takes the lowest hole between the ranges taken by placed
    // items sharing a step, best fit the smallest (else the top). Returns the arena's size.
    std::vector<size_t> placed;
    std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end)
    auto fit = [&](const std::vector<size_t>& order, bool best_fit) {
      placed.clear();
      int64_t arena = base;
      for (size_t id : order) {
        const Item& mine = items[id];
        taken.clear();
        for (size_t other : placed) {
          const Item& theirs = items[other];
          if (theirs.on.front().first > mine.on.back().second ||
              mine.on.front().first > theirs.on.back().second)
            continue;  // disjoint spans: no step in common
          if (share_a_step(mine.on, theirs.on))
            taken.emplace_back(offset[other], offset[other] + theirs.bytes);
        }
        std::sort(taken.begin(), taken.end());
        int64_t at = -1, hole_best = std::numeric_limits<int64_t>::max(), cursor = base;
        for (const auto& [begin, end] : taken) {
          if (begin - cursor >= mine.bytes && (at < 0 || (best_fit && begin - cursor < hole_best))) {
            at = cursor;
            hole_best = begin - cursor;
            if (!best_fit) break;
          }
          cursor = std::max(cursor, (end + alignment - 1) / alignment * alignment);
        }
        if (at < 0) at = cursor;
        offset[id] = at;
        arena = std::max(arena, at + mine.bytes);
        placed.push_back(id);
      }
      return arena;
    };
    // Orders tried (stable: ties keep ids ascending); the smallest arena wins, the first on a tie.
    const std::vector<std::function<bool(size_t, size_t)>> orders = {
        [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; },
        [&](size_t a, size_t b) {
          return static_cast<double>(items[a].bytes) * static_cast<double>(items[a].steps) >
                 static_cast<double>(items[b].bytes) * static_cast<double>(items[b].steps);
        },
        [&](size_t a, size_t b) {
          return items[a].steps != items[b].steps ? items[a].steps > items[b].steps
                                                  : items[a].bytes > items[b].bytes;
        },
    };
    int64_t arena = std::numeric_limits<int64_t>::max();
    best_offset = offset;
    // Large plans get one pass (largest first, first fit): the work grows with the square.
    const size_t passes = ids.size() > kOnePassItems ? 1 : orders.size();
    for (size_t k = 0; k < passes; ++k) {
      std::vector<size_t> order = ids;
      std::stable_sort(order.begin(), order.end(), orders[k]);
      for (bool best_fit : {false, true}) {
        if (best_fit && passes == 1) break;
        const int64_t size = fit(order, best_fit);
        if (size < arena) {
          arena = size;
          best_offset = offset;
        }
      }
    }
    if (arena < plan.memory_bytes()) {
      layout.arena_bytes = arena;
      layout.temporary_bytes = 0;
      // Tensors never on the device keep no range: any offset in the arena will do.
      for (size_t t = 0; t < count; ++t)
        layout.offset[t] = items[t].on.empty() || items[t].bytes == 0 ? 0 : best_offset[t];
      for (size_t i = 0; i < plan.actions.size(); ++i)
        if (plan.actions[i].temporary_offset != kNoTemporary)
          layout.temporary_offset[i] = best_offset[item_of_action[i]] - arena;
    }
  }
  layout.prefetch_waits = prefetch_waits(plan, layout.offset);
  return layout;
}

Plan with_layout(const Plan& plan, const ResidencyLayout& layout) {
  Plan p = plan;
  for (Tensor& t : p.tensors) t.offset = layout.offset[static_cast<size_t>(t.id)];
  p.arena_bytes = layout.arena_bytes;
  p.temporary_bytes = layout.temporary_bytes;
  for (size_t i = 0; i < p.actions.size(); ++i) {
    p.actions[i].wait_evicted = layout.prefetch_waits[i];
    p.actions[i].temporary_offset = layout.temporary_offset[i];
  }
  return p;
}

}  // namespace autovm::rt
