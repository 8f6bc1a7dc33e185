# Sourced by nginx's auto/make once the Makefile is written. nginx compiles every source
# with $(CC) $(CFLAGS), and gcc rejects -std=c++17 for C files (an error under -Werror), so
# the standard is given to this module's C++ objects alone, as make target variables. nginx
# puts an addon's object in addon/<its folder's name>/, so no two folders share a name.
for rl_src in $rl_srcs; do
    rl_obj=`dirname "$rl_src"`
    rl_obj="$NGX_OBJS/addon/`basename "$rl_obj"`/`basename "$rl_src" .cpp`.$ngx_objext"
    echo "$rl_obj: CFLAGS += -std=c++17" >> "$NGX_MAKEFILE"
done
