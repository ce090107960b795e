/* The table of selection rules (select.h): one line per rule. */
#include "select.h"

#include <string.h>

const Selection *const SELECTIONS[] = {&SELECT_PUCT, &SELECT_GUMBEL, NULL};

const Selection *find_selection(const char *name) {
    for (int i = 0; SELECTIONS[i]; i++)
        if (strcmp(SELECTIONS[i]->name, name) == 0) return SELECTIONS[i];
    return NULL;
}
