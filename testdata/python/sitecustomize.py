"""The test's own sitecustomize: record's hook must still run it. It marks the process so that the
test scripts can print that it ran."""

import builtins

builtins.user_sitecustomize_ran = True
