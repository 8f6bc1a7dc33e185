# Sourced by nginx's auto/make once the Makefile is written. nginx compiles every source
# with $(CC) $(CFLAGS), and gcc rejects -std=c++17 for C files (an error under -Werror), so
# the standard is given to this module's C++ objects alone, as make target variables. nginx
# puts an addon's object in addon/<its folder's name>/, so no two folders share a name.
# Hidden visibility too: nginx dlopens modules RTLD_GLOBAL and looks up only the three names
# of its own ngx_modules.c (a C object, with nginx's flags); whatever else the module exported
# would bind the same names in modules loaded after it (t/41-symbols.t).
for rl_src in $rl_srcs; do
    rl_obj=`dirname "$rl_src"`
    rl_obj="$NGX_OBJS/addon/`basename "$rl_obj"`/`basename "$rl_src" .cpp`.$ngx_objext"
    echo "$rl_obj: CFLAGS += -std=c++17 -fvisibility=hidden -fvisibility-inlines-hidden" >> "$NGX_MAKEFILE"
    case $rl_src in */redis_script.cpp) rl_script_obj=$rl_obj ;; esac
done

# The Lua Redis runs, src/core/wire/lua/*.lua, becomes the header redis_script.cpp includes,
# and the dashboard's files (src/ngx/http/api/dashboard) the header of bytes page.cpp includes
# (config's $rl_generated is on the include path); the generators need only sh, sed and od.
rl_lua="$ngx_addon_dir/src/core/wire/lua"
rl_lua_h="$rl_generated/redis_script_lua.h"
rl_dashboard="$ngx_addon_dir/src/ngx/http/api/dashboard"
rl_dashboard_h="$rl_generated/ratelimit_dashboard.h"
rl_dashboard_obj="$NGX_OBJS/addon/api/page.$ngx_objext"
mkdir -p "$rl_generated"
cat << END >> "$NGX_MAKEFILE"

$rl_script_obj: $rl_lua_h

$rl_lua_h: `echo "$rl_lua"/*.lua` $rl_lua/embed.sh
	sh $rl_lua/embed.sh $rl_lua_h

$rl_dashboard_obj: $rl_dashboard_h

$rl_dashboard_h: `echo "$rl_dashboard"/*.html "$rl_dashboard"/*.js "$rl_dashboard"/*.css "$rl_dashboard"/*.svg` $rl_dashboard/embed.sh
	sh $rl_dashboard/embed.sh $rl_dashboard_h
END
