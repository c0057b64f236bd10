/* fabq/fi_fabq.h is a C header: this file compiles it as C (C11, warnings as errors) and is
 * linked into api_async_events_test, which calls fabq_header_compiles_as_c(). */
#include <fabq/fi_fabq.h>

int fabq_header_compiles_as_c(void);

int fabq_header_compiles_as_c(void) {
  struct fi_fabq_async_event ev = {0};
  struct fi_fabq_async_ops ops = {0};
  ev.type = FI_FABQ_EVENT_PORT_ERR;
  return (int)(sizeof(ops) > 0 && ev.type == FI_FABQ_EVENT_PORT_ERR);
}
