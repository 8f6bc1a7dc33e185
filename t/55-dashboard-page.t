# The dashboard page of issue 32 (src/ngx/http/api/dashboard/) in real headless Chromium, against
# a stand-in for ratelimit_api that serves the JSON of the page's API.md (t/lib/dashboard_fixture.py):
# every zone is rendered with its store, policy, keys in use, rates and their chart, in-flight
# slots, sync health and top keys (a hostile key shown as text, not markup; a cut key without a
# reset), and Redis's health; no reset button where write=off; where write=on a reset asks first,
# sends nothing when the question is dismissed and the key's DELETE when it is accepted, and the
# key leaves the list; "more keys" asks .../top; 100 zones render; readable 360 px wide; no
# console error or warning, no CSP violation, no request to another origin; the page's files
# under 100 KB together. (The same page against a real nginx comes once ratelimit_api serves it:
# RLTest::Browser is shared.)
use strict;
use warnings;
use utf8;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Browser qw(browser_missing browse page_problems start_dashboard_fixture dashboard_dir);
use RLTest::Util qw(temp_dir);
use Test::More;

if (my $why = browser_missing()) { plan skip_all => $why }
binmode Test::More->builder->$_, ':encoding(UTF-8)' for qw(output failure_output todo_output);

my $bytes = 0;
$bytes += -s dashboard_dir() . "/$_" for qw(index.html app.js style.css icon.svg);
ok($bytes > 0 && $bytes < 100 * 1024, "the page's files together: $bytes bytes, under 100 KB");

my $f = start_dashboard_fixture();
my $origin = $f->url('');
my $xss = '<img src=x onerror="alert(1)">';

# What each zone's card shows: its store, policies, stats (label => value), key texts, reset
# buttons, notes and chart lines; the same of the Redis cards.
my $cards = <<'JS';
(() => {
  const stats = (c) => Object.fromEntries([...c.querySelectorAll('dl.stat')].map(d =>
    [d.querySelector('dt').textContent, d.querySelector('dd').textContent]));
  const zones = {}, redis = {};
  for (const c of document.querySelectorAll('article.zone')) zones[c.dataset.zone] = {
    store: c.querySelector('.badge.store').textContent,
    policies: [...c.querySelectorAll('.policy')].map(e => e.textContent),
    stats: stats(c),
    keys: [...c.querySelectorAll('td.key')].map(e => e.textContent),
    resets: [...c.querySelectorAll('tbody tr')].map(tr => tr.querySelectorAll('button.reset').length),
    notes: [...c.querySelectorAll('.note')].map(e => e.textContent),
    lines: c.querySelectorAll('polyline').length,
  };
  for (const c of document.querySelectorAll('article.redis')) redis[c.dataset.redis] = stats(c);
  return { zones, redis, order: [...document.querySelectorAll('article.zone')].map(c => c.dataset.zone),
           mode: document.getElementById('mode').textContent, imgs: document.querySelectorAll('img').length };
})()
JS

my $api = "article.zone[data-zone=\"api\"]";
# Rates need two readings: wait for a number in the api zone's admitted/s and its chart.
my @rendered = (
    { wait => "document.querySelectorAll('article.zone').length === 5" },
    { wait => "/^[1-9][0-9,]*\$/.test((document.querySelector('$api .stat.admitted dd') || {}).textContent)"
            . " && document.querySelectorAll('$api polyline').length === 4", timeout => 15 },
);
my $polls = "performance.getEntriesByType('resource').filter(e => /\\/zones\$/.test(e.name)).length";

# ---- write=off
my $shot = $ENV{RLTEST_SCREENSHOT} || temp_dir('rl-dash') . '/dashboard.png';
my $r = browse([
    { viewport => [1280, 1000] },
    { goto => $f->url('/ratelimit/') },
    @rendered,
    { eval => $cards, as => 'cards' },
    { screenshot => $shot },
    { viewport => [360, 800] },
    { wait => "document.documentElement.scrollWidth <= innerWidth", timeout => 5, as => 'narrow' },
    { eval => "[document.documentElement.scrollWidth, innerWidth]", as => 'widths' },
]);
ok($r->{ok}, 'write=off: the page renders') or diag explain $r;
my $c = $r->{values}{cards};
is_deeply($c->{order}, [qw(api login g uploads quiet)], 'every zone, in the API\'s order');
is($c->{zones}{api}{store}, 'shared memory', 'a zone\'s store');
is_deeply($c->{zones}{api}{policies}, ['gcra 10 per 1s, burst 20'], 'its policy');
is_deeply($c->{zones}{login}{policies}, ['sliding 5 per 1m, block 10m'], 'a policy with a block');
is($c->{zones}{api}{stats}{'keys in use'}, '1,234 / 13,107', 'keys in use / capacity');
like($c->{zones}{api}{stats}{'rejected/s'}, qr/^[1-9][0-9,]*$/, 'rejected per second: ' . ($c->{zones}{api}{stats}{'rejected/s'} // ''));
like($c->{zones}{api}{stats}{'blocked/s'}, qr/^[0-9][0-9,.]*$/, 'blocked per second');
is($c->{zones}{api}{lines}, 4, 'the chart: admitted, rejected, delayed, blocked');
like($c->{zones}{quiet}{stats}{evictions} // '', qr{^[1-9][0-9,]* \([0-9.,]+/s\)$}, 'evictions and their rate');
is($c->{zones}{uploads}{stats}{'in flight'}, '7 / 100', 'in-flight slots of a concurrency zone');
is($c->{zones}{g}{stats}{hosts}, '2', 'a sync zone\'s hosts');
like($c->{zones}{g}{stats}{rounds}, qr{/s\)$}, 'its rounds and their rate');
is_deeply([@{ $c->{zones}{api}{keys} }[0, 1]], ['203.0.113.7', $xss], 'the top keys, a hostile one as text');
like($c->{zones}{api}{keys}[2], qr/^Bearer eyJ.*…$/, 'a cut key, marked');
is($c->{imgs}, 0, 'no markup made of a key');
ok(grep({ $_ eq 'Off (top=0).' } @{ $c->{zones}{quiet}{notes} }), 'a zone with top=0 says so');
is_deeply([map { @{ $c->{zones}{$_}{resets} } } sort keys %{ $c->{zones} }], [(0) x 5], 'write=off: no reset button');
is($c->{mode}, 'read only', 'write=off said');
my $m = $c->{redis}{main} // {};
like($m->{'calls/s'} // '', qr/^[1-9][0-9,]*$/, 'Redis calls per second');
is($m->{'round trip p99'}, '≤ 5.00 ms', 'its round trip p99 from the histogram (99.5% within 5 ms)');
like($m->{timeout} // '', qr/^\d+ \([0-9.]+\/s\)$/, 'its errors by reason');
ok($r->{values}{narrow}, 'no sideways scrolling 360 px wide') or diag explain $r->{values}{widths};
is_deeply([page_problems($r, $origin)], [], 'no console error, no violation, nothing from another origin');
is_deeply([grep { $_->{method} ne 'GET' } @{ $r->{requests} }], [], 'only GETs');

# ---- write=on: dismissed, nothing sent
$r = browse([
    { dialogs => 'dismiss' },
    { goto => $f->url('/ratelimit-admin/') },
    @rendered,
    { eval => $cards, as => 'cards' },
    { click => "$api button.reset" },
    { eval => "window.rlPolls = $polls" },
    { wait => "$polls >= window.rlPolls + 1", timeout => 10 },
]);
ok($r->{ok}, 'write=on: the page renders, a reset dismissed') or diag explain $r;
$c = $r->{values}{cards};
is_deeply($c->{zones}{api}{resets}, [1, 1, 0], 'a reset button per top key (not for a cut key)');
is_deeply([map { @{ $c->{zones}{$_}{resets} } } qw(login g uploads quiet)], [1, 1], 'in every zone with keys');
is($c->{mode}, 'write=on: keys can be reset', 'write=on said');
is(scalar @{ $r->{dialogs} }, 1, 'the reset asked first');
like($r->{dialogs}[0]{message} // '', qr/"203\.0\.113\.7" in zone "api"/, 'naming the key and the zone');
is_deeply([grep { $_->{method} eq 'DELETE' } @{ $r->{requests} }], [], 'dismissed: nothing sent');
is_deeply([page_problems($r, $origin)], [], 'write=on: no console error, nothing from another origin');

# ---- write=on: accepted, the key's DELETE; more keys
my $row = "[...document.querySelectorAll('$api tbody tr')].find(tr => tr.querySelector('td.key').textContent === "
    . "'<img src=x onerror=\"alert(1)\">')";
$r = browse([
    { dialogs => 'accept' },
    { goto => $f->url('/ratelimit-admin/') },
    @rendered,
    { click => "$api button.reset" },
    { wait => "/reset\\.\$/.test(document.getElementById('banner').textContent)", timeout => 10 },
    { wait => "![...document.querySelectorAll('$api td.key')].some(e => e.textContent === '203.0.113.7')", timeout => 10 },
    { eval => "$row.querySelector('button.reset').click()" },
    { wait => "!$row", timeout => 10 },
    { click => "$api button.more" },
    { wait => "document.querySelectorAll('$api tbody tr').length === 3", timeout => 10 },
    { eval => $cards, as => 'cards' },
]);
ok($r->{ok}, 'write=on: two resets accepted, more keys') or diag explain $r;
is(scalar @{ $r->{dialogs} }, 2, 'each asked first');
my @deletes = map { $_->{path} } grep { $_->{method} eq 'DELETE' } @{ $f->requests };
is_deeply(\@deletes, ['/ratelimit-admin/zones/api?addr=203.0.113.7',
    '/ratelimit-admin/zones/api?key=%3Cimg%20src%3Dx%20onerror%3D%22alert%281%29%22%3E'],
    'the DELETEs the API spelt, as they were spelt');
ok((grep { $_->{method} eq 'GET' && $_->{path} eq '/ratelimit-admin/zones/api/top?n=20' } @{ $f->requests }),
    'more keys: .../top?n=20');
my @left = @{ $r->{values}{cards}{zones}{api}{keys} // [] };
is_deeply([@left[1, 2]], ['198.51.100.23', '2001:db8::/56'], 'the longer list, without the keys reset');
is_deeply([page_problems($r, $origin)], [], 'no console error, nothing from another origin');

# ---- 100 zones
my $f100 = start_dashboard_fixture(100);
$r = browse([
    { goto => $f100->url('/ratelimit/') },
    { wait => "document.querySelectorAll('article.zone').length === 100", timeout => 15 },
    { eval => "document.querySelector('article.zone:last-child').dataset.zone", as => 'last' },
    { eval => "document.getElementById('filter').value = 'z10'; document.getElementById('filter')"
            . ".dispatchEvent(new Event('input')); [...document.querySelectorAll('article.zone')].map(c => c.dataset.zone)",
      as => 'filtered' },
]);
ok($r->{ok}, '100 zones render') or diag explain $r;
is($r->{values}{last}, 'z100', 'the last of them');
is_deeply($r->{values}{filtered}, [qw(z10 z100)], 'the filter keeps the zones whose name has it');
is_deeply([page_problems($r, $f100->url(''))], [], 'no console error');

done_testing;
