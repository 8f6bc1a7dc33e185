package RLTest::Proxy;
# A misbehaving Redis for the tests: a forked child on a free 127.0.0.1 port that relays
# every connection to a real server (normally a redis-server from start_redis) and, on command
# from the test, stops answering, truncates, corrupts, drips or floods the replies. Core Perl,
# loopback only; the child stops with the test file (its control socket closes) or after
# `limit` seconds (default 300), whichever comes first.
#
#   my $p = start_proxy(upstream => $redis->port [, port => N, limit => secs]);
#   $p->port, $p->addr              where nginx connects
#   $p->mode($name [, $arg])        switches every connection, open now and future, to a mode:
#     pass                 relay both ways (the default)
#     silent               read and drop commands, answer nothing, keep the connection open
#     truncate             forward the first half of the next reply, then that connection is
#                          dead (silent) for good, even after `pass`
#     corrupt              replace each reply by $arg (default "?garbage\r\n"), not RESP
#     drip [ms]            forward replies one byte every $arg ms (default 50)
#     huge_bulk [bytes [n]]   answer the next command with '$999999999\r\n' (or $n) and a stream
#                          of 'x', at most `bytes` (default 200 MB) or until the peer closes;
#                          the connection is dead afterwards
#     huge_array [bytes [n]]  the same with '*999999999\r\n' (or *n) and ':1\r\n' elements
#     error $reply         answer every command with the raw bytes $reply (nothing relayed)
#     reset                reset (RST) each connection when it next sends a command
#     sync_rewrite $spec [n [zone]]  relay everything, and rewrite the replies to the next n
#                          (default 1) sync calls ("sync" mode of the script or its count form
#                          "count"; for keys of zone `zone` only, if given), then go back to
#                          pass by itself. $spec:
#                          comma-separated FIELD=VALUE with FIELD one of now (the reply's first
#                          integer; now+=N adds N) or a, b, c, granted, retry (those of every
#                          item), or `extra`
#                          (one integer more: a count off by one)
#     sync_lose            relay everything; each sync call's reply (Redis ran it) is replaced by
#                          an error reply: a reply lost after Redis applied the call
#     sync_close           relay everything; each sync call's reply (Redis ran it) is thrown away
#                          and its connection closed: the reply lost with the connection
#     settle_drop [n]      relay everything; the replies to the next n (default 1) settle calls
#                          (modes "charge" and "refund" of the script) are thrown away once Redis
#                          ran them, and their connection is closed, then back to pass by itself
#   $p->rewritten           sync replies rewritten, lost or closed on so far
#   $p->count_calls         sync calls in the count form relayed so far
#   $p->settles             "<ran> <dropped>": settle calls Redis answered (through the proxy)
#                          and the replies of those thrown away, so far
#   $p->accepted            connections accepted so far
#   $p->stop                stops the child (also done at the end of the test file)
# A connection that lost a command (silent, truncate, huge_*) stays out of step with Redis:
# like a half-open TCP connection, only a new one works again.
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use Socket qw(AF_UNIX SOCK_STREAM PF_UNSPEC SOL_SOCKET SO_LINGER);
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use RLTest::Util qw(stop_child);

my @ALL;
my $CREATOR = $$;

sub start {
    my ($class, %o) = @_;
    my $up = $o{upstream} // die "start_proxy: upstream port required\n";
    $up = $up->port if ref $up;
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $o{port} // 0, Proto => 'tcp',
        Listen => 128, ReuseAddr => 1) or die "proxy: cannot listen: $!\n";
    socketpair(my $parent, my $child, AF_UNIX, SOCK_STREAM, PF_UNSPEC) or die "socketpair: $!";
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        close $parent;
        eval { _serve($listen, $child, $up, $o{limit} // 300) };
        POSIX::_exit(0);
    }
    close $child;
    close $listen;
    $parent->autoflush(1);
    my $self = bless { pid => $pid, ctl => $parent, port => 0, upstream => $up, creator => $$ }, $class;
    push @ALL, $self;
    $self->{port} = $self->_ask('port');
    return $self;
}

sub port { $_[0]{port} }
sub addr { "127.0.0.1:$_[0]{port}" }
sub pid  { $_[0]{pid} }

sub mode {
    my ($self, $name, @arg) = @_;
    my $r = $self->_ask("mode $name " . unpack('H*', join ' ', grep { defined } @arg));
    die "proxy: mode $name: $r\n" unless $r eq 'ok';
    return $self;
}

sub accepted { $_[0]->_ask('count') }
sub rewritten { $_[0]->_ask('rewritten') }
sub count_calls { $_[0]->_ask('count_calls') }
sub settles { $_[0]->_ask('settles') }

sub _ask {
    my ($self, $line) = @_;
    die "proxy stopped\n" unless $self->{pid};
    my $s = $self->{ctl};
    local $SIG{PIPE} = 'IGNORE';
    print {$s} "$line\n" or die "proxy: control: $!\n";
    my $sel = IO::Select->new($s);
    my $buf = '';
    my $deadline = time + 5;
    while (index($buf, "\n") < 0) {
        my $left = $deadline - time;
        die "proxy: no answer to '$line'\n" if $left <= 0 || !$sel->can_read($left);
        sysread($s, $buf, 256, length $buf) or die "proxy: control closed\n";
    }
    chomp $buf;
    return $buf;
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid} && $self->{creator} == $$;
    close $self->{ctl};
    stop_child($self->{pid}, 'TERM', 3);
    delete $self->{pid};
}

sub stop_all { $_->stop for @ALL; @ALL = () }

END {
    my $rc = $?;
    stop_all() if $$ == $CREATOR;
    $? = $rc;
}

# ------------------------------------------------------------------ the child

# The length of the complete command (RESP multibulk or inline) at the start of $buf, or -1.
sub _command_len {
    my ($buf) = @_;
    if (substr($buf, 0, 1) eq '*') {
        my $e = index($buf, "\r\n");
        return -1 if $e < 0;
        my $count = substr($buf, 1, $e - 1);
        my $pos = $e + 2;
        for (1 .. ($count =~ /^\d+$/ ? $count : 0)) {
            my $le = index($buf, "\r\n", $pos);
            return -1 if $le < 0;
            my $len = substr($buf, $pos + 1, $le - $pos - 1);
            $len = 0 unless $len =~ /^\d+$/;
            $pos = $le + 2 + $len + 2;
            return -1 if $pos > length $buf;
        }
        return $pos;
    }
    my $e = index($buf, "\r\n");
    return $e < 0 ? -1 : $e + 2;
}

# Removes the complete commands at the start of $$buf; returns how many.
sub _take_commands {
    my ($buf) = @_;
    my $n = 0;
    while (length $$buf) {
        my $len = _command_len($$buf);
        last if $len < 0;
        substr($$buf, 0, $len) = '';
        $n++;
    }
    return $n;
}

# The complete commands at the start of $$buf, removed and returned.
sub _take_command_texts {
    my ($buf) = @_;
    my @out;
    while (length $$buf) {
        my $len = _command_len($$buf);
        last if $len < 0;
        push @out, substr($$buf, 0, $len, '');
    }
    return @out;
}

sub _serve {
    my ($listen, $ctl, $up, $limit) = @_;
    $SIG{ALRM} = sub { POSIX::_exit(0) };
    $SIG{PIPE} = 'IGNORE';
    $SIG{TERM} = sub { POSIX::_exit(0) };
    alarm $limit;
    $listen->blocking(0);
    my ($mode, $arg) = ('pass', '');
    my $accepted = 0;
    our %SYNC = (left => 0, spec => '', zone => '', done => 0, lose => 0, close => 0);
    our %SETTLE = (drop => 0, ran => 0, dropped => 0);
    my %conns;    # fileno of the client socket -> connection
    my $ctl_buf = '';
    while (1) {
        my $rd = IO::Select->new($listen, $ctl);
        my $wr = IO::Select->new;
        my $now = time;
        my $wait = 1;
        for my $c (values %conns) {
            $rd->add($c->{c});
            $rd->add($c->{u}) if $c->{u};
            $wr->add($c->{c}) if length $c->{to_c} || $c->{gen};
            $wr->add($c->{u}) if $c->{u} && length $c->{to_u};
            if (length $c->{drip}) {
                my $d = $c->{next_drip} - $now;
                $wait = $d if $d < $wait;
            }
        }
        $wait = 0 if $wait < 0;
        my ($r, $w) = IO::Select->select($rd, $wr, undef, $wait);
        $now = time;
        for my $fh (@{ $r || [] }) {
            if ($fh == $ctl) {
                my $n = sysread($ctl, $ctl_buf, 4096, length $ctl_buf);
                POSIX::_exit(0) unless $n;    # the test is gone
                while ((my $i = index($ctl_buf, "\n")) >= 0) {
                    my $line = substr($ctl_buf, 0, $i + 1, '');
                    chomp $line;
                    my ($cmd, @a) = split / /, $line;
                    my $reply = 'ok';
                    if ($cmd eq 'port') { $reply = $listen->sockport }
                    elsif ($cmd eq 'count') { $reply = $accepted }
                    elsif ($cmd eq 'rewritten') { $reply = $SYNC{done} }
                    elsif ($cmd eq 'count_calls') { $reply = $SYNC{count_calls} // 0 }
                    elsif ($cmd eq 'settles') { $reply = "$SETTLE{ran} $SETTLE{dropped}" }
                    elsif ($cmd eq 'mode') {
                        $mode = $a[0];
                        $arg = pack('H*', $a[1] // '');
                        $reply = "unknown mode" unless $mode =~ /^(pass|silent|truncate|corrupt|drip|huge_bulk|huge_array|error|reset|sync_rewrite|sync_lose|sync_close|settle_drop)$/;
                        $SYNC{lose} = $mode eq 'sync_lose' ? 1 : 0;
                        $SYNC{close} = $mode eq 'sync_close' ? 1 : 0;
                        $SETTLE{drop} = $mode eq 'settle_drop' ? ($arg || 1) : 0;
                        if ($mode eq 'sync_rewrite') {
                            my ($spec, $n, $zone) = split / /, $arg;
                            @SYNC{qw(spec left zone)} = ($spec // '', $n || 1, $zone // '');
                        } else {
                            $SYNC{left} = 0;
                        }
                        # They relay everything: the replies are rewritten on their way back.
                        $mode = 'pass' if $mode =~ /^(sync_|settle_)/;
                    }
                    syswrite($ctl, "$reply\n");
                }
                next;
            }
            if ($fh == $listen) {
                while (my $s = $listen->accept) {
                    $accepted++;
                    my $u = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $up, Proto => 'tcp', Timeout => 2);
                    $s->blocking(0);
                    $u->blocking(0) if $u;
                    $conns{ fileno $s } = { c => $s, u => $u, to_c => '', to_u => '', cmds => '', drip => '',
                        next_drip => 0, dead => 0, gen => undef, seen => '', kinds => [], replies => '' };
                    if (!$u) { close $s; delete $conns{ fileno $s } }
                }
                next;
            }
            my ($c) = grep { $_->{c} == $fh || ($_->{u} && $_->{u} == $fh) } values %conns;
            next unless $c;
            my $buf = '';
            my $n = sysread($fh, $buf, 65536);
            if (!$n) {
                if (defined $n || $!{ECONNRESET}) { _close($c, \%conns) }
                next;
            }
            if ($fh == $c->{c}) { _from_client($c, $buf, $mode, $arg, \%conns) }
            else { _from_upstream($c, $buf, $mode, $arg, $now, \%conns) }
        }
        for my $fh (@{ $w || [] }) {
            my ($c) = grep { $_->{c} == $fh || ($_->{u} && $_->{u} == $fh) } values %conns;
            next unless $c;
            if ($fh == $c->{c}) {
                if ($c->{gen} && length $c->{to_c} < 65536) {
                    my $g = $c->{gen};
                    my $chunk = $g->{unit} x int(65536 / length $g->{unit});
                    $chunk = substr($chunk, 0, $g->{left}) if length $chunk > $g->{left};
                    $c->{to_c} .= $chunk;
                    $g->{left} -= length $chunk;
                    undef $c->{gen} if $g->{left} <= 0;
                }
                my $n = syswrite($fh, $c->{to_c});
                if (!defined $n) { _close($c, \%conns) unless $!{EAGAIN}; next }
                substr($c->{to_c}, 0, $n) = '';
            } else {
                my $n = syswrite($fh, $c->{to_u});
                if (!defined $n) { _close($c, \%conns) unless $!{EAGAIN}; next }
                substr($c->{to_u}, 0, $n) = '';
            }
        }
        for my $c (values %conns) {
            next unless length $c->{drip} && $now >= $c->{next_drip};
            $c->{to_c} .= substr($c->{drip}, 0, 1, '');
            $c->{next_drip} = $now + $c->{drip_ms} / 1000;
        }
    }
}

sub _close {
    my ($c, $conns) = @_;
    delete $conns->{ fileno $c->{c} };
    close $c->{c};
    close $c->{u} if $c->{u};
}

# Sends what is already due to the client (best effort), then closes both sides.
sub _flush_and_close {
    my ($c, $conns) = @_;
    syswrite($c->{c}, $c->{to_c}) if length $c->{to_c};
    _close($c, $conns);
}

sub _from_client {
    my ($c, $buf, $mode, $arg, $conns) = @_;
    return if $c->{dead};
    if ($mode eq 'silent') { return }
    if ($mode eq 'reset') {
        setsockopt($c->{c}, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
        _close($c, $conns);
        return;
    }
    if ($mode eq 'error') {
        $c->{cmds} .= $buf;
        my $n = _take_commands(\$c->{cmds});
        $c->{to_c} .= $arg x $n;
        return;
    }
    if ($mode eq 'huge_bulk' || $mode eq 'huge_array') {
        my $bulk = $mode eq 'huge_bulk';
        my ($bytes, $announce) = split / /, $arg;
        $c->{to_c} .= ($bulk ? '$' : '*') . ($announce || 999999999) . "\r\n";
        $c->{gen} = { unit => $bulk ? 'x' : ":1\r\n", left => $bytes || 200 * 1024 * 1024 };
        $c->{dead} = 1;
        return;
    }
    $c->{to_u} .= $buf;
    # Which replies will be sync calls' (kept in step with Redis's replies, in order).
    $c->{seen} .= $buf;
    my @texts = _take_command_texts(\$c->{seen});
    our %SYNC;
    $SYNC{count_calls} += grep { /\r\n\$5\r\ncount\r\n/ } @texts;
    push @{ $c->{kinds} }, map { _kind($_) } @texts;
}

# 'sync:<the keys>' for a sync call, 'settle' for a charge or a refund, '' for anything else.
sub _kind {
    my ($cmd) = @_;
    return 'settle' if $cmd =~ /\r\n\$6\r\n(?:charge|refund)\r\n/;
    return '' unless $cmd =~ /\r\n\$(?:4\r\nsync|5\r\ncount)\r\n/;  # the sync mode or its count form
    my @keys = $cmd =~ /\r\n\$\d+\r\n([^\r\n]*\{[^\r\n]*)\r\n/g;
    return 'sync:' . join(' ', @keys);
}

# The length of one complete RESP reply at the start of $buf (from $pos), or -1.
sub _reply_len {
    my ($buf, $pos) = @_;
    $pos //= 0;
    my $e = index($buf, "\r\n", $pos);
    return -1 if $e < 0;
    my $t = substr($buf, $pos, 1);
    my $v = substr($buf, $pos + 1, $e - $pos - 1);
    my $end = $e + 2;
    if ($t eq '$') {
        return $end - $pos if $v < 0;
        return length($buf) >= $end + $v + 2 ? $end + $v + 2 - $pos : -1;
    }
    if ($t eq '*') {
        return $end - $pos if $v < 0;
        for (1 .. $v) {
            my $l = _reply_len($buf, $end);
            return -1 if $l < 0;
            $end += $l;
        }
        return $end - $pos;
    }
    return $end - $pos;
}

# A sync call's reply, rewritten as the spec says (a reply that is not an array of integers
# is left as it is).
sub _rewrite {
    my ($reply, $spec) = @_;
    my @v = $reply =~ /:(-?\d+)\r\n/g;
    return $reply unless $reply =~ /^\*(\d+)\r\n/ && $1 == @v && @v >= 1;
    my %f = (a => 0, b => 1, c => 2, granted => 3, retry => 4);
    my $extra = 0;
    for my $kv (split /,/, $spec) {
        my ($k, $val) = split /=/, $kv, 2;
        $k =~ s/\+$/+/;
        if ($k eq 'now') { $v[0] = $val }
        elsif ($k eq 'now+') { $v[0] += $val }
        elsif ($k eq 'extra') { $extra = 1 }
        elsif (exists $f{$k}) {
            for (my $i = 1 + $f{$k}; $i < @v; $i += 5) { $v[$i] = $val }
        }
    }
    push @v, 0 if $extra;
    return '*' . scalar(@v) . "\r\n" . join('', map { ":$_\r\n" } @v);
}

sub _from_upstream {
    my ($c, $buf, $mode, $arg, $now, $conns) = @_;
    return if $c->{dead};
    if ($mode eq 'silent' || $mode eq 'error' || $mode eq 'reset') { return }
    if ($mode eq 'truncate') {
        my $half = int(length($buf) / 2) || 1;
        $c->{to_c} .= substr($buf, 0, $half) if length $buf > 1;
        $c->{dead} = 1;
        return;
    }
    if ($mode eq 'corrupt') { $c->{to_c} .= length $arg ? $arg : "?garbage\r\n"; return }
    if ($mode eq 'drip') {
        $c->{drip_ms} = length $arg ? $arg : 50;
        $c->{next_drip} = $now if !length $c->{drip};
        $c->{drip} .= $buf;
        return;
    }
    if (length $c->{drip}) { $c->{drip} .= $buf; return }    # keep the order after drip
    our (%SYNC, %SETTLE);
    # Replies in step with the commands: a sync call's may be rewritten or lost.
    $c->{replies} .= $buf;
    while (length $c->{replies}) {
        my $len = _reply_len($c->{replies});
        last if $len < 0;
        my $reply = substr($c->{replies}, 0, $len, '');
        my $kind = shift(@{ $c->{kinds} }) // '';
        if ($kind eq 'settle') {
            $SETTLE{ran}++;
            if ($SETTLE{drop} > 0) {
                $SETTLE{drop}--;
                $SETTLE{dropped}++;
                _flush_and_close($c, $conns);    # this reply and any after it lost
                return;
            }
        }
        if ($kind =~ /^sync:(.*)/) {
            my $keys = $1;
            if ($SYNC{close}) {
                $SYNC{done}++;
                _flush_and_close($c, $conns);    # this reply and any after it lost
                return;
            }
            if ($SYNC{lose}) {
                $reply = "-ERR ratelimit test proxy: reply lost\r\n";
                $SYNC{done}++;
            } elsif ($SYNC{left} > 0 && (!length $SYNC{zone} || index($keys, "{$SYNC{zone}:") >= 0)) {
                $reply = _rewrite($reply, $SYNC{spec});
                $SYNC{left}--;
                $SYNC{done}++;
            }
        }
        $c->{to_c} .= $reply;
    }
}

1;
