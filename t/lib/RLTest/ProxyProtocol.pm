package RLTest::ProxyProtocol;
# PROXY protocol headers, as a load balancer in front of nginx sends them first on a
# connection (`listen ... proxy_protocol`): what $proxy_protocol_addr and, with realip's
# set_real_ip_from, $remote_addr come from.
#
#   pp_v1($src, $dst, $sport, $dport) -> "PROXY TCP4 src dst sport dport\r\n" (TCP6 for an
#       address with ':')
#   pp_v2($src, $dst, $sport, $dport) -> the binary header (version 2, PROXY, TCP over IPv4 or
#       IPv6)
use strict;
use warnings;
use Exporter 'import';
use Socket qw(inet_pton AF_INET AF_INET6);

our @EXPORT_OK = qw(pp_v1 pp_v2);

sub pp_v1 {
    my ($src, $dst, $sport, $dport) = @_;
    my $fam = $src =~ /:/ ? 'TCP6' : 'TCP4';
    return "PROXY $fam $src $dst $sport $dport\r\n";
}

sub pp_v2 {
    my ($src, $dst, $sport, $dport) = @_;
    my $v6 = $src =~ /:/;
    my $af = $v6 ? AF_INET6 : AF_INET;
    my $addrs = inet_pton($af, $src) . inet_pton($af, $dst) . pack('nn', $sport, $dport);
    # signature, version 2 and the PROXY command, TCP over IPv4 (0x11) or IPv6 (0x21), length
    return "\r\n\r\n\0\r\nQUIT\n" . pack('CCn', 0x21, $v6 ? 0x21 : 0x11, length $addrs) . $addrs;
}

1;
