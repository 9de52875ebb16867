// The one case a rank process runs (tests/rank_roles.h): the sliced pipeline across processes.
#include "rank_roles.h"

RANK_ROLE_MAIN
