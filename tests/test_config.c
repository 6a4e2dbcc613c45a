#include "fixture.h"
TestSuite(x, .fini = fx_close);
