// What gloo's transport/tcp/pair.h needs of gloo/common/memory.h, which
// Debian's libgloo-dev includes from its headers but does not ship: the two
// pointer wrappers a pair keeps in its members (written here, not gloo's
// file). Nothing here is called; only the layout counts, so that a pair's
// members lie where libgloo put them: each wrapper holds one std::shared_ptr
// or std::weak_ptr, as gloo's do. (libgloo's Pair::signalExceptionExternal
// locks the pair's mutex at 0x1c8 and reads its exception at 0x378, where
// these put them; GlooCommunicatorTest.AStrangersMessageForNoReceiveIsNot-
// ACrash fails when the pair guard cannot fail the pair through them.)
#ifndef DISTOPT_THIRD_PARTY_GLOO_TCP_GLOO_COMMON_MEMORY_H_
#define DISTOPT_THIRD_PARTY_GLOO_TCP_GLOO_COMMON_MEMORY_H_

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr final {
 private:
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr final {
 private:
  std::weak_ptr<T> ptr_;
};

}  // namespace gloo

#endif  // DISTOPT_THIRD_PARTY_GLOO_TCP_GLOO_COMMON_MEMORY_H_
