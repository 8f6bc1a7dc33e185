# The module exports only what nginx looks up: built with -fvisibility=hidden
# -fvisibility-inlines-hidden (config.make), its own functions and variables (rl_*, rl::,
# ngx_http_ratelimit_module itself, which nginx reaches through ngx_modules[]) stay inside it.
# The Debian package's module is checked where it is built, t/40-debian.t.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Symbols qw(dynamic_symbols nginx_lookups);
use Test::More;

my $so = module_so();
ok(-f $so, "module file exists: $so") or do { diag('build it with ./build.sh build'); done_testing; exit };

# Control: nm reads this file's dynamic table (what it needs from nginx and hiredis).
my ($undefined, $err) = dynamic_symbols($so, 'undefined');
ok($undefined, 'nm -D --undefined-only reads the module') or diag($err);
my %needs = map { $_ => 1 } @{ $undefined // [] };
ok($needs{$_}, "... it needs $_") for qw(ngx_palloc redisReaderFeed);

my $defined;
($defined, $err) = dynamic_symbols($so);
ok($defined, 'nm -D --defined-only reads the module') or diag($err);
my %lookup = map { $_ => 1 } nginx_lookups();
my @more = grep { !$lookup{$_} } @{ $defined // [] };
is_deeply($defined, [nginx_lookups()], 'it defines only ngx_modules, ngx_module_names, ngx_module_order')
  or diag(scalar(@more) . " more, the first: " . join(' ', @more[0 .. ($#more < 9 ? $#more : 9)]));

done_testing;
