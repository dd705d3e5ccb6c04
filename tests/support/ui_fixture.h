/* ui_fixture.h — what the web UI tests (tests/ui) share: stories-student as the device's SLM, stories260K as an
 * embedded LLM whose every routed token waits ui_rtt_ms (so a long generation lasts long enough to stop), libcurl
 * initialized. */
#ifndef TR_TEST_UI_FIXTURE_H
#define TR_TEST_UI_FIXTURE_H

#include "tokroute.h"

extern double ui_rtt_ms;

/* cmocka group setup / teardown: load and free both models, curl_global_init / cleanup. */
int ui_fixture_setup(void **state);
int ui_fixture_teardown(void **state);
/* tr_ui's defaults with the SLM, a free port, one thread and the embedded LLM as the backend. */
tr_ui_params ui_fixture_params(void);

#endif
