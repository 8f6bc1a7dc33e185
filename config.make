# Sourced by nginx's auto/make once the Makefile is written. nginx compiles every source
# with $(CC) $(CFLAGS), and gcc rejects -std=c++17 for C files (an error under -Werror), so
# the standard is given to this module's C++ objects alone, as make target variables. nginx
# puts an addon's object in addon/<its folder's name>/, so no two folders share a name.
for rl_src in $rl_srcs; do
    rl_obj=`dirname "$rl_src"`
    rl_obj="$NGX_OBJS/addon/`basename "$rl_obj"`/`basename "$rl_src" .cpp`.$ngx_objext"
    echo "$rl_obj: CFLAGS += -std=c++17" >> "$NGX_MAKEFILE"
done

# The dashboard's files (src/ngx/http/api/dashboard) become the header of bytes page.cpp
# includes, made at build time with sh, od and sed (dashboard/embed.sh); its folder is on that
# object's include path alone.
rl_dashboard="$ngx_addon_dir/src/ngx/http/api/dashboard"
rl_dashboard_dir="$NGX_OBJS/addon/ratelimit_generated"
rl_dashboard_obj="$NGX_OBJS/addon/api/page.$ngx_objext"
mkdir -p "$rl_dashboard_dir"
cat << END >> "$NGX_MAKEFILE"

$rl_dashboard_obj: CFLAGS += -I$rl_dashboard_dir
$rl_dashboard_obj: $rl_dashboard_dir/ratelimit_dashboard.h

$rl_dashboard_dir/ratelimit_dashboard.h: `echo "$rl_dashboard"/*.html "$rl_dashboard"/*.js "$rl_dashboard"/*.css "$rl_dashboard"/*.svg` $rl_dashboard/embed.sh
	sh $rl_dashboard/embed.sh $rl_dashboard_dir/ratelimit_dashboard.h
END
