// One page of a listing kept in a map ordered by id (parameters, autograd
// contexts): what a paged List call selects under the owner's lock.
#ifndef DISTOPT_COMMON_PAGE_AFTER_H_
#define DISTOPT_COMMON_PAGE_AFTER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace distopt {

template <typename Value>
struct IdPage {
  std::vector<Value> values;
  // The id to continue after, when more remain.
  std::optional<uint64_t> next_after_id;
};

// The values after `after_id` that keep(value) accepts, in id order, at
// most `limit` of them (a limit of 0 is taken as 1).
template <typename Map, typename Keep>
IdPage<typename Map::mapped_type> PageAfter(const Map& by_id, uint64_t after_id,
                                            size_t limit, Keep keep) {
  IdPage<typename Map::mapped_type> page;
  limit = std::max<size_t>(limit, 1);
  uint64_t last_id = after_id;
  for (auto it = by_id.upper_bound(after_id); it != by_id.end(); ++it) {
    if (!keep(it->second)) continue;
    if (page.values.size() == limit) {
      page.next_after_id = last_id;
      break;
    }
    page.values.push_back(it->second);
    last_id = it->first;
  }
  return page;
}

}  // namespace distopt

#endif  // DISTOPT_COMMON_PAGE_AFTER_H_
