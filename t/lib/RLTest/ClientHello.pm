package RLTest::ClientHello;
# A TLS ClientHello as a browser sends it first (one record), for servers that read it with
# ssl_preread: what $ssl_preread_server_name, $ssl_preread_alpn_protocols and
# $ssl_preread_protocol come from. Only the preread parses it: the key share is random bytes, so
# no handshake follows.
#
#   client_hello(sni => 'a.example' | ['a.example', ...], alpn => ['h2', ...], tls13 => 1)
#       -> the record's bytes. sni: the server_name extension's host names (none without it);
#          alpn: an ALPN extension; tls13 (1): supported_versions offers TLS 1.3 and 1.2
#          ($ssl_preread_protocol TLSv1.3), 0 leaves it out (TLSv1.2)
use strict;
use warnings;
use Exporter 'import';

our @EXPORT_OK = qw(client_hello);

sub _u16 { pack 'n', $_[0] }
sub _vec16 { my ($b) = @_; return _u16(length $b) . $b }
sub _vec8 { my ($b) = @_; return pack('C', length $b) . $b }
sub _ext { my ($type, $body) = @_; return _u16($type) . _vec16($body) }
sub _random { my ($n) = @_; return join '', map { chr int rand 256 } 1 .. $n }

sub client_hello {
    my (%o) = @_;
    my $tls13 = $o{tls13} // 1;
    my @names = ref $o{sni} ? @{ $o{sni} } : defined $o{sni} ? ($o{sni}) : ();
    my $ext = '';
    $ext .= _ext(0x0000, _vec16(join '', map { pack('C', 0) . _vec16($_) } @names)) if @names;
    $ext .= _ext(0x000a, _vec16(_u16(0x001d) . _u16(0x0017)));                    # x25519, P-256
    $ext .= _ext(0x000b, _vec8(pack 'C', 0));                                      # uncompressed points
    $ext .= _ext(0x000d, _vec16(join '', map { _u16($_) } 0x0403, 0x0804, 0x0401));
    $ext .= _ext(0x0010, _vec16(join '', map { _vec8($_) } @{ $o{alpn} })) if $o{alpn};
    if ($tls13) {
        $ext .= _ext(0x002b, _vec8(_u16(0x0304) . _u16(0x0303)));
        $ext .= _ext(0x0033, _vec16(_u16(0x001d) . _vec16(_random(32))));
    }
    my $suites = join '', map { _u16($_) } 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030;
    my $body = _u16(0x0303) . _random(32) . _vec8(_random(32)) . _vec16($suites) . _vec8(pack 'C', 0)
      . _vec16($ext);
    my $handshake = pack('C', 1) . substr(pack('N', length $body), 1) . $body;
    return pack('C', 0x16) . _u16(0x0301) . _vec16($handshake);
}

1;
