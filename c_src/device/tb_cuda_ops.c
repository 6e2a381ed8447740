#include "tb_cuda_ops.h"

#include <stdio.h>

static _Thread_local char message[400];

const char *tb_cuda_failed(const char *what, const char *error)
{
    if (!error)
        return NULL;
    snprintf(message, sizeof message, "%s: %s", what, error);
    return message;
}
