# The dashboard (issue 32) served by a real nginx's ratelimit_api, in real headless Chromium
# (RLTest::Browser): the page and its files come from the module (the bytes of
# src/ngx/http/api/dashboard, with the headers API.md lists; JSON clients keep getting JSON);
# the page renders every zone (shared memory, Redis, sync, in-flight, top=0); a key flooding
# once the page polls appears in its zone's top list within a few seconds; a hostile key is
# shown as text; no reset button without write=on; with write=on the reset asks, sends the key's
# DELETE, the key leaves the list and its next request passes; no console error or warning, no
# CSP violation, no request to another origin. RLTEST_SCREENSHOT=path keeps a screenshot of the
# page (README's).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Backend qw(start_backend);
use RLTest::Browser qw(browser_missing browse page_problems dashboard_dir);
use RLTest::Util qw(temp_dir stop_child);
use Test::More;
use Time::HiRes qw(time sleep);

if (my $why = browser_missing()) { plan skip_all => $why }

my $redis = start_redis();
my $rp = $redis->port;
my $be = start_backend();
my $bp = $be->port;

my $n = start_nginx(<<"EOF");
    ratelimit_redis main 127.0.0.1:$rp prefix=t92:;
    ratelimit_zone api     key=\$arg_k requests=1 period=1h;
    ratelimit_zone login   key=\$http_x_key requests=2 period=1m algo=sliding block=10m redis=main;
    ratelimit_zone g       key=\$arg_k rate=5r/s burst=5 redis=main sync=200ms;
    ratelimit_zone uploads key=\$arg_key concurrency=2;
    ratelimit_zone quiet   key=\$arg_k rate=100r/s top=0;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /a { ratelimit zone=api; empty_gif; }
        location /login { ratelimit zone=login; empty_gif; }
        location /g { ratelimit zone=g; empty_gif; }
        location /up { ratelimit zone=uploads; proxy_pass http://127.0.0.1:$bp/hold; }
        location /q { ratelimit zone=quiet; empty_gif; }
        location /ratelimit/ { ratelimit_api; access_log %%DIR%%/api.log; }
        location /ratelimit-admin/ { ratelimit_api write=on; }
    }
EOF
my $port = $n->port;
my $origin = "http://127.0.0.1:$port";

# ---- the files, over HTTP

my %files = ('' => 'index.html', 'app.js' => 'app.js', 'style.css' => 'style.css', 'icon.svg' => 'icon.svg');
my %types = ('' => 'text/html; charset=utf-8', 'app.js' => 'text/javascript; charset=utf-8',
    'style.css' => 'text/css; charset=utf-8', 'icon.svg' => 'image/svg+xml');
my $bytes = 0;
for my $f (sort keys %files) {
    my $want = slurp(dashboard_dir() . "/$files{$f}");
    $bytes += length $want;
    my ($st, $h, $body) = http_request($port, "/ratelimit/$f", { Accept => 'text/html,*/*' });
    is($st, 200, "GET /ratelimit/$f");
    ok($body eq $want, "... the bytes of dashboard/$files{$f}");
    is($h->{'content-type'}, $types{$f}, "... Content-Type $types{$f}");
    is($h->{'x-content-type-options'}, 'nosniff', '... nosniff');
    is($h->{'cache-control'}, 'no-cache', '... no-cache');
    is($h->{'referrer-policy'}, 'no-referrer', '... no referrer');
    is($h->{'content-security-policy'}, $f eq '' ? "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'" : undef,
       $f eq '' ? '... the page: its CSP' : '... no CSP on a file');
    ($st, $h, $body) = http_request($port, "/ratelimit/$f", { Accept => 'text/html' }, 'HEAD');
    ok($st == 200 && $body eq '' && $h->{'content-length'} == length $want, "HEAD /ratelimit/$f: its headers alone");
    ($st, $h) = http_request($port, "/ratelimit/$f", { Accept => 'text/html' }, 'POST');
    is($st, 405, "POST /ratelimit/$f: 405");
}
note("the dashboard's files: $bytes bytes");
ok($bytes < 100 * 1024, "the dashboard's files together: $bytes bytes, under 100 KB");
{
    my ($st, $h, $body) = http_request($port, '/ratelimit/', { Accept => 'application/json' });
    is($st, 404, 'GET <api>/ without text/html in Accept: 404');
    like($body, qr/^\{"error":"unknown endpoint: use \.\.\.\/zones"\}$/, '... as JSON, as before');
    ($st) = http_request($port, '/ratelimit/index.html', { Accept => 'text/html' });
    is($st, 404, 'the page only at <api>/');
    ($st) = http_request($port, '/ratelimit/API.md');
    is($st, 404, 'nothing else of the folder');
}

# ---- traffic the page shows: a key held in flight, rejections in each zone, a hostile key

my $hostile = '<img src=x onerror="alert(1)">';
my $held = $be->enter($port, '/up', 'big');
ok($held->{held}, 'an upload held in flight');
is(join(' ', map { ($n->get('/login', { 'X-Key' => $hostile }))[0] } 1 .. 4), '200 200 429 429', 'a hostile key rejected in login');
is(join(' ', map { ($n->get("/g?k=t$_"))[0] } 1 .. 3), '200 200 200', 'the sync zone in use');

# A flood of one key that starts once the page polls (its first GET .../zones in the API's
# access log): 20 requests a second, 20 seconds at most, from a child; the time of its first
# rejection in a file.
my $dir = $n->dir;
my $flooder = fork // die "fork: $!";
if (!$flooder) {
    my $deadline = time + 60;
    sleep 0.05 until (-s "$dir/api.log" && slurp("$dir/api.log") =~ m{GET /ratelimit/zones }) || time > $deadline;
    my $c = RLTest::KeepAlive->new($port);
    my $end = time + 20;
    for (my $i = 0; time < $end; $i++) {
        my ($st) = $c->get('/a?k=203.0.113.7');
        spew("$dir/flood.start", time) if ($st // 0) == 429 && !-e "$dir/flood.start";
        # Some traffic elsewhere for the page's other cards and charts.
        $c->get("/g?k=t$i") if $i % 3 == 0;
        $c->get('/login', { 'X-Key' => 'alice' }) if $i % 10 == 0;
        sleep 0.05;
    }
    POSIX::_exit(0);
}

my $shot = $ENV{RLTEST_SCREENSHOT} || temp_dir('rl-dash') . '/dashboard.png';
my $cards = <<'JS';
(() => {
  const zones = {};
  for (const c of document.querySelectorAll('article.zone')) zones[c.dataset.zone] = {
    store: c.querySelector('.badge.store').textContent,
    keys: [...c.querySelectorAll('td.key')].map(e => e.textContent),
    resets: c.querySelectorAll('button.reset').length,
    stats: Object.fromEntries([...c.querySelectorAll('dl.stat')].map(d =>
      [d.querySelector('dt').textContent, d.querySelector('dd').textContent])),
    notes: [...c.querySelectorAll('.note')].map(e => e.textContent),
  };
  return { zones, order: [...document.querySelectorAll('article.zone')].map(c => c.dataset.zone),
           redis: [...document.querySelectorAll('article.redis')].map(c => c.dataset.redis),
           mode: document.getElementById('mode').textContent, imgs: document.querySelectorAll('img').length };
})()
JS
my $listed = "[...document.querySelectorAll('article.zone[data-zone=\"api\"] td.key')].some(e => e.textContent === '203.0.113.7')";
my $r = browse([
    { viewport => [1280, 1100] },
    { goto => "$origin/ratelimit/" },
    { wait => "document.querySelectorAll('article.zone').length === 5", timeout => 15 },
    { wait => "$listed ? Date.now() / 1000 : 0", timeout => 20, as => 'seen' },
    # Rates need two readings after the flood began: the api zone's rejected/s above 0.
    { wait => "/^[1-9]/.test((document.querySelector('article.zone[data-zone=\"api\"] .stat.rejected dd') || {}).textContent)",
      timeout => 10 },
    { wait => "document.querySelectorAll('article.zone[data-zone=\"api\"] polyline').length === 4", timeout => 10 },
    { eval => $cards, as => 'cards' },
    # The screenshot once the charts hold ten seconds of the flood.
    { wait => "performance.getEntriesByType('resource').filter(e => /\\/zones\$/.test(e.name)).length >= 8", timeout => 20 },
    { screenshot => $shot },
]);
stop_child($flooder, 'TERM', 3);
ok($r->{ok}, 'write=off: the page renders, the flooding key appears') or diag explain $r;
my $c = $r->{values}{cards} // {};
is_deeply($c->{order}, [qw(api login g uploads quiet)], 'every zone, in the configuration\'s order');
is_deeply({ map { $_ => $c->{zones}{$_}{store} } keys %{ $c->{zones} } },
    { api => 'shared memory', login => 'redis', g => 'sync optimistic', uploads => 'in-flight', quiet => 'shared memory' },
    'each with its store');
my $start = -e "$dir/flood.start" ? slurp("$dir/flood.start") : undef;
ok(defined $start && defined $r->{values}{seen}, 'the flood began, the page saw it');
my $after = ($r->{values}{seen} // 0) - ($start // 0);
cmp_ok($after, '<', 5, sprintf('the flooding key listed %.1f s after its first rejection', $after));
ok(grep({ $_ eq $hostile } @{ $c->{zones}{login}{keys} || [] }), 'the hostile key, as text')
    or diag explain $c->{zones}{login}{keys};
is($c->{imgs}, 0, 'no markup made of it');
is($c->{zones}{uploads}{stats}{'in flight'}, '1 / 2', 'the upload in flight');
ok(grep({ $_ eq 'Off (top=0).' } @{ $c->{zones}{quiet}{notes} || [] }), 'top=0 said');
is_deeply($c->{redis}, ['main'], 'the Redis server');
is($c->{mode}, 'read only', 'write=off said');
is_deeply([map { $c->{zones}{$_}{resets} } sort keys %{ $c->{zones} || {} }], [0, 0, 0, 0, 0], 'write=off: no reset button');
is_deeply([page_problems($r, $origin)], [], 'no console error or warning, no violation, nothing from another origin');
ok(-s $shot, "a screenshot: $shot");

# ---- write=on: reset a key from the page

is(join(' ', map { ($n->get('/a?k=198.51.100.23'))[0] } 1 .. 4), '200 429 429 429', 'another key rejected');
my $row = "[...document.querySelectorAll('article.zone[data-zone=\"api\"] tbody tr')].find(tr => "
    . "tr.querySelector('td.key').textContent === '198.51.100.23')";
$r = browse([
    { dialogs => 'accept' },
    { goto => "$origin/ratelimit-admin/" },
    { wait => "!!$row", timeout => 15 },
    { eval => $cards, as => 'cards' },
    { eval => "$row.querySelector('button.reset').click(); true" },
    { wait => "/reset\\.\$/.test(document.getElementById('banner').textContent)", timeout => 10 },
    { wait => "!$row", timeout => 10 },
]);
ok($r->{ok}, 'write=on: a reset accepted, the key left the list') or diag explain $r;
is($r->{values}{cards}{mode}, 'write=on: keys can be reset', 'write=on said');
cmp_ok($r->{values}{cards}{zones}{api}{resets}, '>=', 2, 'a reset button per top key');
is(scalar @{ $r->{dialogs} }, 1, 'it asked first');
like($r->{dialogs}[0]{message} // '', qr/"198\.51\.100\.23" in zone "api"/, 'naming the key and the zone');
is_deeply([map { "$_->{method} $_->{url}" } grep { $_->{method} eq 'DELETE' } @{ $r->{requests} }],
    ["DELETE $origin/ratelimit-admin/zones/api?key=198.51.100.23"], 'one DELETE, the query the API spelt');
is(($n->get('/a?k=198.51.100.23'))[0], 200, 'the next request of that key passes');
is_deeply([page_problems($r, $origin)], [], 'no console error or warning, nothing from another origin');
is($be->finish('big', $held), '200', 'the upload ends');

done_testing;
