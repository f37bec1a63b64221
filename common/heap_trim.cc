#include "common/heap_trim.h"

#include <malloc.h>

namespace distopt {

bool ReturnFreedHeap(size_t threshold) {
  if (mallinfo2().fordblks < threshold) return false;
  malloc_trim(0);
  return true;
}

}  // namespace distopt
