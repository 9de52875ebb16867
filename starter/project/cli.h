// Moved to app/cli.h; kept so the programs that still include it build.
#pragma once
#include "app/cli.h"
