package RLTest::Browser;
# A page in real headless Chromium (Debian's chromium), driven through its DevTools protocol by
# t/lib/cdp_page.py (/usr/bin/python3, standard library only; its header lists the steps), and
# a stand-in for ratelimit_api serving the dashboard with fixture JSON (t/lib/dashboard_fixture.py).
#
#   my $why = browser_missing();     undef, or why the tests cannot run (to skip with)
#   my $r = browse(\@steps, %o);     runs the steps in a fresh browser (o{timeout}, 60 s): the
#                                    report (ok, error, failed, values, console, exceptions, log,
#                                    requests, responses, failed_requests, dialogs)
#   my @p = page_problems($r, $origin)   what a clean page never shows: console errors and
#                                    warnings, exceptions, error log entries (CSP violations,
#                                    failed loads), failed requests, requests to another origin
#   my $f = start_dashboard_fixture([$zones]);  the stand-in on a free loopback port; stopped at
#                                    the end of the test file
#   $f->port, $f->url($path), $f->requests (every request it answered: [{method, path, accept}]),
#   $f->stop
#   dashboard_dir()                  src/ngx/http/api/dashboard of this tree
use strict;
use warnings;
use Exporter 'import';
use JSON::PP ();
use RLTest::Http qw(http_request);
use RLTest::Util qw(repo_root run_cmd stop_child spew temp_dir start_port_child);

our @EXPORT_OK = qw(browser_missing browse page_problems start_dashboard_fixture dashboard_dir);

my $PY = '/usr/bin/python3';
my $CHROMIUM = $ENV{CHROMIUM_BIN} || '/usr/bin/chromium';
my @ALL;

sub dashboard_dir { return repo_root() . '/src/ngx/http/api/dashboard' }

sub browser_missing {
    return "no $PY" unless -x $PY;
    return "no $CHROMIUM (Debian's chromium; ./build.sh test installs it)" unless -x $CHROMIUM;
    return undef;
}

sub browse {
    my ($steps, %o) = @_;
    my $timeout = $o{timeout} // 60;
    my $dir = temp_dir('rl-browse');
    spew("$dir/steps.json", JSON::PP->new->encode($steps));
    # Chromium is not the module: under ./build.sh test-asan it must not inherit the sanitizers'
    # preloaded runtimes (it then never answers).
    delete local @ENV{qw(LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS)};
    my ($rc, $out) = run_cmd($timeout + 15, $PY, repo_root() . '/t/lib/cdp_page.py', '--chromium', $CHROMIUM,
        '--timeout', $timeout, "$dir/steps.json");
    my ($json) = $out =~ /^(\{.*\})\s*\z/ms;
    my $r = $json ? eval { JSON::PP::decode_json($json) } : undef;
    return $r if $r;
    return { ok => 0, error => "cdp_page.py: rc $rc: $out", values => {},
        map { $_ => [] } qw(console exceptions log requests responses failed_requests dialogs) };
}

sub page_problems {
    my ($r, $origin) = @_;
    my @p;
    push @p, "console $_->{type}: $_->{text}" for grep { $_->{type} =~ /^(error|warning|assert)$/ } @{ $r->{console} };
    push @p, "exception: $_" for @{ $r->{exceptions} };
    push @p, "log $_->{level} ($_->{source}): $_->{text} $_->{url}"
        for grep { ($_->{level} // '') =~ /^(error|warning)$/ } @{ $r->{log} };
    push @p, "failed request: $_->{url}: $_->{error}" for @{ $r->{failed_requests} };
    for my $q (@{ $r->{requests} }) {
        my ($o) = $q->{url} =~ m{^([a-z][a-z0-9+.-]*://[^/]+)}i;
        push @p, "request to another origin: $q->{method} $q->{url}" unless defined $o && $o eq $origin;
    }
    return @p;
}

sub start_dashboard_fixture {
    my ($zones) = @_;
    my $secs = ($ENV{RLTEST_TIMEOUT} || 150) + 30;
    my ($pid, $port) = start_port_child('RLTest::Browser: the fixture', $PY,
        repo_root() . '/t/lib/dashboard_fixture.py', $secs, $zones // 5);
    my $self = bless { pid => $pid, port => $port, creator => $$ }, __PACKAGE__;
    push @ALL, $self;
    return $self;
}

sub port { $_[0]{port} }
sub url  { "http://127.0.0.1:$_[0]{port}$_[1]" }

sub requests {
    my ($self) = @_;
    my ($status, undef, $body) = http_request($self->{port}, '/__requests');
    return [] unless ($status // 0) == 200;
    return JSON::PP::decode_json($body);
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid} && $$ == $self->{creator};
    stop_child(delete $self->{pid}, 'TERM', 3);
}

END { local $?; $_->stop for @ALL; @ALL = () }

1;
