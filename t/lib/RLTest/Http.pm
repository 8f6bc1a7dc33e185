package RLTest::Http;
# Raw HTTP/1.1 to 127.0.0.1, core Perl: one request per connection (http_request), the
# pieces RLTest::KeepAlive shares (request_text, parse_head, dechunk), and what tests parse
# out of responses (parse_sf_list for RateLimit / RateLimit-Policy, gif_body_ok).
use strict;
use warnings;
use Exporter 'import';
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

our @EXPORT_OK = qw(http_request request_text parse_head dechunk parse_sf_list gif_body_ok);

our $TIMEOUT = 10;    # seconds for any single network operation

sub _read_until_close {
    my ($sock, $deadline) = @_;
    my $sel = IO::Select->new($sock);
    my $buf = '';
    while (1) {
        my $left = $deadline - time;
        last if $left <= 0;
        last unless $sel->can_read($left);
        my $n = sysread($sock, $buf, 65536, length $buf);
        last unless $n;
    }
    return $buf;
}

# parse_head($head) -> (status, \%headers): header names lower case, repeated headers joined
# with ', '; {':count'}{name} how many times each came, {':status'} the status line,
# {':raw'} the whole head.
sub parse_head {
    my ($head) = @_;
    my @lines = split /\r\n/, $head;
    my $status_line = shift @lines // '';
    my ($status) = $status_line =~ m{^HTTP/\d\.\d (\d{3})};
    my %h;
    my %count;
    for my $l (@lines) {
        next unless $l =~ /^([^:]+):\s*(.*?)\s*$/;
        my $k = lc $1;
        $count{$k}++;
        $h{$k} = exists $h{$k} ? "$h{$k}, $2" : $2;
    }
    $h{':count'}  = \%count;
    $h{':status'} = $status_line;
    $h{':raw'}    = $head;
    return ($status, \%h);
}

sub request_text {
    my ($method, $path, $hdrs, $keepalive) = @_;
    my $req = "$method $path HTTP/1.1\r\nHost: localhost\r\n";
    $req .= "Connection: " . ($keepalive ? 'keep-alive' : 'close') . "\r\n";
    for my $k (sort keys %{ $hdrs || {} }) {
        $req .= "$k: $hdrs->{$k}\r\n";
    }
    return "$req\r\n";
}

# http_request($port, $path, \%headers, $method) -> (status, \%headers, body)
sub http_request {
    my ($port, $path, $hdrs, $method) = @_;
    $method ||= 'GET';
    my $deadline = time + $TIMEOUT;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp',
        Timeout => $TIMEOUT) or return (undef, {}, "connect failed: $!");
    $s->autoflush(1);
    print $s request_text($method, $path, $hdrs, 0);
    my $buf = _read_until_close($s, $deadline);
    close $s;
    my $i = index($buf, "\r\n\r\n");
    return (undef, {}, $buf) if $i < 0;
    my ($status, $h) = parse_head(substr($buf, 0, $i));
    my $body = substr($buf, $i + 4);
    if (($h->{'transfer-encoding'} // '') =~ /chunked/i) {
        $body = dechunk($body);
    }
    return ($status, $h, $body);
}

sub dechunk {
    my ($b) = @_;
    my $out = '';
    while ($b =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
        my $n = hex $1;
        last if $n == 0;
        $out .= substr($b, 0, $n);
        substr($b, 0, $n + 2) = '';
    }
    return $out;
}

# Parses a RateLimit / RateLimit-Policy value: '"a";q=10;w=1, "b";r=3;t=2' ->
# ( { name => 'a', q => 10, w => 1 }, { name => 'b', r => 3, t => 2 } ). undef -> ().
sub parse_sf_list {
    my ($v) = @_;
    return () unless defined $v && length $v;
    my @items;
    for my $item (split /\s*,\s*/, $v) {
        my ($name, @params) = split /;/, $item;
        my %i;
        ($i{name} = $name // '') =~ s/^\s*"(.*)"\s*$/$1/;
        for my $p (@params) {
            my ($k, $val) = split /=/, $p, 2;
            $i{$k} = $val;
        }
        push @items, \%i;
    }
    return @items;
}

sub gif_body_ok {
    my ($body) = @_;
    return defined $body && length($body) == 43 && substr($body, 0, 6) eq 'GIF89a';
}

1;
