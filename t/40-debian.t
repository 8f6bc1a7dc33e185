# The Debian packages on this machine's own nginx: ./build.sh deb builds them, apt-get installs
# them, Debian's stock nginx.conf loads them and a site limits with the http one, a stream{}
# server with the stream one; removing the http package disables the module and leaves nginx
# working, purging removes its files. It changes the system, so it runs as root only, and
# restores /etc/nginx and uninstalls the packages at the end, also on failure.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use RLTest;
use RLTest::Symbols qw(dynamic_symbols nginx_lookups);
use Test::More;
use Digest::MD5;
use Fcntl qw(:flock);
use File::Find;
use File::Path qw(remove_tree);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use Time::HiRes qw(sleep time);

my $PKG   = 'libnginx-mod-http-ratelimit';
my $ETC   = '/etc/nginx';
my $NGINX = '/usr/sbin/nginx';
my $SO    = '/usr/lib/nginx/modules/ngx_http_ratelimit_module.so';
my $AVAIL = '/usr/share/nginx/modules-available/mod-http-ratelimit.conf';
my $LINK  = "$ETC/modules-enabled/50-mod-http-ratelimit.conf";
my $SITE  = "$ETC/conf.d/t40-ratelimit-$$.conf";    # the stock http block includes conf.d/*.conf
my $SPKG  = 'libnginx-mod-stream-ratelimit';
my $SSO   = '/usr/lib/nginx/modules/ngx_stream_ratelimit_module.so';
my $SAVAIL = '/usr/share/nginx/modules-available/mod-stream-ratelimit.conf';
my $SLINK = "$ETC/modules-enabled/70-mod-stream-ratelimit.conf";    # after 50-mod-stream.conf
my $STREAM_SO = '/usr/lib/nginx/modules/ngx_stream_module.so';      # libnginx-mod-stream's
my @APT   = ('apt-get', '-q', '-y', '-o', 'DPkg::Lock::Timeout=300');

plan skip_all => 'needs root: it installs the package into the system nginx (CI runs as root)'
  if $> != 0;
plan skip_all => "the package is for Debian's nginx; this run tests $ENV{NGINX_BIN}"
  if $ENV{NGINX_BIN} && $ENV{NGINX_BIN} ne $NGINX;
for my $need ('/usr/bin/apt-get', '/usr/bin/dpkg', $NGINX, "$ETC/nginx.conf", $STREAM_SO) {
    plan skip_all => "needs Debian's apt-get, dpkg, nginx and libnginx-mod-stream (./build.sh "
      . "test installs them): $need is missing" unless -e $need;
}

# The package build, apt and dpkg are not the sanitizer build's business.
delete $ENV{LD_PRELOAD};
$ENV{DEBIAN_FRONTEND} = 'noninteractive';
alarm(900);    # the whole file; every command below has its own, shorter bound

my $ROOT = repo_root();
my $TMP  = tempdir('t40-XXXXXX', TMPDIR => 1, CLEANUP => 1);
chmod 0755, $TMP;

# One run at a time on a machine: they would install and remove the same package.
open my $lock, '>', '/tmp/ratelimit-t40-debian.lock' or die "lock: $!";
flock($lock, LOCK_EX) or die "flock: $!";

# (exit code, stdout and stderr) of @cmd, killed after $secs seconds.
sub run {
    my ($secs, @cmd) = @_;
    return run_cmd($secs, @cmd);
}

sub tail { my @l = split /\n/, $_[0]; return join "\n", @l[($#l > 40 ? $#l - 40 : 0) .. $#l] }

# dpkg's two-letter state ('ii', 'rc', ...) of a package, '' when it is not installed at all.
sub pkg_state {
    my ($pkg) = @_;
    my ($rc, $out) = run(30, 'dpkg-query', '-W', '-f=${db:Status-Abbrev}', $pkg);
    return $rc == 0 && $out =~ /^(\S[^n])/ ? $1 : '';
}

for my $pkg ($PKG, $SPKG) {
    plan skip_all => "$pkg is installed already: this test would remove it"
      if pkg_state($pkg) =~ /^(ii|rc)$/;
}

# Every path under /etc/nginx with its type, mode and link target or content digest.
sub manifest {
    my %m;
    find({ no_chdir => 1, wanted => sub {
        my @st = lstat $_ or return;
        my $what = -l _ ? 'l ' . readlink($_) : -d _ ? 'd' : do {
            open my $fh, '<', $_ or die "$_: $!";
            binmode $fh;
            'f ' . Digest::MD5->new->addfile($fh)->hexdigest;
        };
        $m{$_} = sprintf('%o %d:%d %s', $st[2] & 07777, $st[4], $st[5], $what);
    } }, $ETC);
    return \%m;
}

my $before = manifest();
(run(120, 'tar', '-C', '/etc', '-cpf', "$TMP/etc-nginx.tar", 'nginx'))[0] == 0 or die "cannot back up $ETC";

my $nginx_pid;    # the master of the nginx this test started
my $finished;

sub stop_nginx {
    my $m = $nginx_pid or return;
    $nginx_pid = undef;
    my @children = grep { ((slurp("/proc/$_/stat") =~ /^\d+ \(.*\) \S (\d+)/s)[0] // 0) == $m }
      map { s{^/proc/}{}r } glob('/proc/[0-9]*');
    kill 'QUIT', $m;
    my $deadline = time + 10;
    sleep 0.05 while pid_alive($m) && time < $deadline;
    kill 'KILL', $m, @children if pid_alive($m);
}

# Leaves the machine as it was: no nginx of ours, no package, /etc/nginx as backed up.
sub restore {
    return if $finished++;
    stop_nginx();
    my @ours = grep { pkg_state($_) ne '' } $PKG, $SPKG;
    run(300, @APT, 'purge', @ours) if @ours;
    my $now = manifest();
    for my $p (sort { length $b <=> length $a } grep { !exists $before->{$_} } keys %$now) {
        -d $p && !-l $p ? remove_tree($p) : unlink $p;
    }
    run(120, 'tar', '-C', '/etc', '-xpf', "$TMP/etc-nginx.tar");
}

END {
    my $rc = $?;
    alarm(0);    # the restore must run whole; its commands are bounded
    restore() if defined $before;
    $? = $rc;
}

# ---------------------------------------------------------------- build

my ($rc, $out) = run(600, "$ROOT/build.sh", 'deb');
is($rc, 0, './build.sh deb succeeds') or do { diag(tail($out)); done_testing; exit };
unlike($out, qr/^E: /m, 'lintian reports no error');
my (undef, $version) = run(30, 'dpkg-parsechangelog', '-l', "$ROOT/debian/changelog", '-S', 'Version');
my (undef, $arch) = run(30, 'dpkg', '--print-architecture');
chomp($version, $arch);
my $deb = "$ROOT/build/${PKG}_${version}_${arch}.deb";
ok(-f $deb, "built build/${PKG}_${version}_${arch}.deb (version from debian/changelog)")
  or do { done_testing; exit };
my $sdeb = "$ROOT/build/${SPKG}_${version}_${arch}.deb";
ok(-f $sdeb, "... and build/${SPKG}_${version}_${arch}.deb") or do { done_testing; exit };

my (undef, $depends) = run(30, 'dpkg-deb', '-f', $deb, 'Depends');
my ($abi) = slurp('/usr/share/nginx/src/debian/libnginx-mod.abisubstvars') =~ /^nginx:abi=(\S+)/m;
ok($abi, "nginx-dev names its ABI ($abi)");
like($depends, qr/(?:^|, )\Q$abi\E(?:,|$)/m, 'the package depends on that nginx ABI')
  or diag("Depends: $depends");
like($depends, qr/(?:^|, )libhiredis0\.14\b/m, '... and on libhiredis0.14');
my (undef, $sdepends) = run(30, 'dpkg-deb', '-f', $sdeb, 'Depends');
like($sdepends, qr/(?:^|, )\Q$abi\E(?:,|$)/m, 'the stream package depends on that nginx ABI')
  or diag("Depends: $sdepends");
like($sdepends, qr/(?:^|, )libnginx-mod-stream(?:,|$| )/m, '... and on libnginx-mod-stream');

# ---------------------------------------------------------------- install

($rc, $out) = run(400, @APT, 'install', $deb);
is($rc, 0, 'apt-get install ./build/...deb succeeds') or diag(tail($out));
is(pkg_state($PKG), 'ii', 'the package is installed');
ok(-f $SO, "the module is in $SO");
my ($exports, $nm_err) = dynamic_symbols($SO);
is_deeply($exports, [nginx_lookups()], '... and defines only the names nginx looks up (as t/41-symbols.t)')
  or diag($nm_err || join(" ", grep { defined } @{ $exports // [] }[0 .. 9]));
is(slurp($AVAIL), "load_module modules/ngx_http_ratelimit_module.so;\n", "$AVAIL loads it");
is(readlink($LINK) // '(no link)', $AVAIL, "$LINK enables it");

my $port = free_port();
my $site = <<"EOF";
# written by t/40-debian.t, removed at its end
ratelimit_zone t40 key=\$binary_remote_addr requests=2 period=1h burst=1 size=1m;
server {
    listen 127.0.0.1:$port;
    location / {
        ratelimit zone=t40;
        empty_gif;
    }
}
EOF
spew($SITE, $site);
spew("$TMP/site.conf", $site);

($rc, $out) = run(60, $NGINX, '-t');
is($rc, 0, "nginx -t with the stock $ETC/nginx.conf and a site using a zone") or diag($out);
like($out, qr/test is successful/, '... test is successful');

# The stock main configuration would also start the default site on port 80 and write the
# system's pid file: this one keeps the stock modules-enabled/ and only the test's site.
my $main = "$TMP/nginx.conf";
spew($main, <<"EOF");
user www-data;
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/error.log;
include $ETC/modules-enabled/*.conf;
events { worker_connections 64; }
http {
    access_log off;
    include $TMP/site.conf;
}
EOF

($rc, $out) = run(30, $NGINX, '-c', $main, '-e', "$TMP/error.log");
is($rc, 0, 'nginx starts with the packaged module') or diag($out . slurp("$TMP/error.log"));
my $deadline = time + 10;
until ((($nginx_pid) = slurp("$TMP/nginx.pid") =~ /(\d+)/) && IO::Socket::INET->new(
        PeerAddr => "127.0.0.1:$port", Timeout => 1)) {
    last if time > $deadline;
    sleep 0.05;
}
my @r = map { [http_request($port, '/')] } 1 .. 3;
is_deeply([map { $_->[0] // 'ERR' } @r], [200, 200, 429], 'burst 1 + 1 pass, the third gets 429');
my $h = $r[2][1];
is($h->{'ratelimit-policy'}, '"t40";q=2;w=3600', '429 carries RateLimit-Policy');
like($h->{'ratelimit'} // '', qr/^"t40";r=0;t=\d+$/, '... RateLimit with r=0');
like($h->{'retry-after'} // '', qr/^[1-9]\d*$/, '... and Retry-After');
unlike(slurp("$TMP/error.log"), qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in its error log');
stop_nginx();
ok(!IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 1), 'that nginx is stopped');

# ---------------------------------------------------------------- the stream package

($rc, $out) = run(400, @APT, 'install', $sdeb);
is($rc, 0, 'apt-get install ./build/...stream...deb succeeds') or diag(tail($out));
is(pkg_state($SPKG), 'ii', 'the stream package is installed');
ok(-f $SSO, "its module is in $SSO");
($exports, $nm_err) = dynamic_symbols($SSO);
is_deeply($exports, [nginx_lookups()], '... and defines only the names nginx looks up')
  or diag($nm_err || join(" ", grep { defined } @{ $exports // [] }[0 .. 9]));
is(slurp($SAVAIL), "load_module modules/ngx_stream_ratelimit_module.so;\n", "$SAVAIL loads it");
is(readlink($SLINK) // '(no link)', $SAVAIL, "$SLINK enables it, after the stream module's");
($rc, $out) = run(60, $NGINX, '-t');
is($rc, 0, "nginx -t with the stock $ETC/nginx.conf and both packages") or diag($out);

# A stream{} server that takes two connections at once from one address: the third is closed
# before a byte reaches the upstream (none here: it answers with return).
my $sport = free_port();
spew($main, <<"EOF");
user www-data;
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/error.log;
include $ETC/modules-enabled/*.conf;
events { worker_connections 64; }
stream {
    ratelimit_zone t40s key=\$binary_remote_addr requests=2 period=1h burst=1 size=1m;
    server {
        listen 127.0.0.1:$sport;
        ratelimit zone=t40s;
        return "served\\n";
    }
}
EOF
($rc, $out) = run(30, $NGINX, '-c', $main, '-e', "$TMP/error.log");
is($rc, 0, 'nginx starts with the packaged stream module') or diag($out . slurp("$TMP/error.log"));
$deadline = time + 10;
until ((($nginx_pid) = slurp("$TMP/nginx.pid") =~ /(\d+)/) && IO::Socket::INET->new(
        PeerAddr => "127.0.0.1:$sport", Timeout => 1)) {
    last if time > $deadline;
    sleep 0.05;
}
# The wait above used one connection of the two (the first that connected).
my @got;
for (1 .. 3) {
    my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$sport", Timeout => 2) or last;
    $c->timeout(2);
    local $/;
    push @got, scalar(<$c>) // '';
}
is_deeply(\@got, ["served\n", '', ''], 'the second connection is served, the next two closed with nothing sent');
like(slurp("$TMP/error.log"), qr/limiting connections, excess: [\d.]+ by zone "t40s"/,
  '... and the rejection is in the error log') or diag(slurp("$TMP/error.log"));
unlike(slurp("$TMP/error.log"), qr/\[(emerg|alert|crit)\]/, 'no emerg/alert/crit in its error log');
stop_nginx();

($rc, $out) = run(400, @APT, 'purge', $SPKG);
is($rc, 0, 'apt-get purge of the stream package succeeds') or diag(tail($out));
is(pkg_state($SPKG), '', 'dpkg does not know it any more');
ok(!-e $_ && !-l $_, "$_ is gone") for $SSO, $SAVAIL, $SLINK, "$SLINK.removed";

# ---------------------------------------------------------------- remove, purge

unlink $SITE;
($rc, $out) = run(400, @APT, 'remove', $PKG);
is($rc, 0, 'apt-get remove succeeds') or diag(tail($out));
is(pkg_state($PKG), 'rc', 'only its configuration is left');
ok(!-e $SO, 'the module file is gone');
ok(!-e $LINK && -l "$LINK.removed", "the module is disabled ($LINK.removed, as Debian's modules)");
($rc, $out) = run(60, $NGINX, '-t');
is($rc, 0, 'nginx -t with the stock configuration passes after the removal') or diag($out);
($rc, $out) = run(60, $NGINX, '-t', '-c', $main);
isnt($rc, 0, 'the configuration that started before is rejected now');
like($out, qr/unknown directive "ratelimit_zone"/, '... the module is no longer loaded');

($rc, $out) = run(400, @APT, 'purge', $PKG);
is($rc, 0, 'apt-get purge succeeds') or diag(tail($out));
is(pkg_state($PKG), '', 'dpkg does not know the package any more');
ok(!-e $_ && !-l $_, "$_ is gone") for $SO, $AVAIL, $LINK, "$LINK.removed", "/usr/share/doc/$PKG";
($rc, $out) = run(60, $NGINX, '-t');
is($rc, 0, 'nginx -t passes after the purge') or diag($out);

restore();
is_deeply(manifest(), $before, "$ETC is as before the test");

done_testing;
