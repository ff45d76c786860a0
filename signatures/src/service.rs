//! The flow's application protocol, named as Zeek's conn.log `service` names it (`http`, `ssl`,
//! `ssh`, `dns`, `dhcp`, `quic`), so `tailscope export zeek` and users' queries agree with Zeek.
//!
//! Zeek finds a TCP service by content, not by port: its dynamic protocol detection signatures
//! for HTTP, SSL/TLS and SSH match the first bytes of one side and require the reverse
//! direction's signature too (`requires-reverse-signature` in Zeek's `dpd.sig` files). So a
//! service here is named when both sides' first stream bytes look like it: a request line
//! answered by `HTTP/`, a TLS handshake record answered by one, `SSH-` both ways. On the ports
//! Zeek registers those analyzers on (its `likely_server_ports`), the analyzer is attached from the
//! first packet and confirms on the client's side alone (e.g. a GET to port 80 whose response was
//! never captured is `http` in Zeek's log): there the client's opening suffices. DNS and DHCP are
//! named by port (53, 137, 5353 and 5355; 67 and 68), where Zeek attaches them. A TCP connection
//! whose start was not captured (no SYN, no SYN-ACK) has no service: Zeek attaches no protocol
//! analyzer to a connection it picked up mid-stream (wikipedia.pcap's port 35634, history `DdA`).

/// What the first payload bytes of one direction of a TCP stream look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Opening {
    /// No payload at the start of this direction's stream yet.
    #[default]
    Unseen,
    HttpRequest,
    HttpResponse,
    /// A TLS (or SSL 3.0) handshake record header: content type 22, version 3.x.
    TlsHandshake,
    Ssh,
    Other,
}

const HTTP_METHODS: [&[u8]; 9] =
    [b"GET ", b"POST ", b"HEAD ", b"PUT ", b"DELETE ", b"OPTIONS ", b"CONNECT ", b"PATCH ", b"TRACE "];

/// The opening of a stream whose first payload is `payload` (at least its captured part).
pub fn opening(payload: &[u8]) -> Opening {
    if HTTP_METHODS.iter().any(|m| payload.starts_with(m)) {
        Opening::HttpRequest
    } else if payload.starts_with(b"HTTP/") {
        Opening::HttpResponse
    } else if payload.len() >= 3 && payload[0] == 22 && payload[1] == 3 && payload[2] <= 4 {
        Opening::TlsHandshake
    } else if payload.len() >= 4 && payload[..4].eq_ignore_ascii_case(b"SSH-") {
        Opening::Ssh
    } else {
        Opening::Other
    }
}

// Zeek's likely_server_ports of its HTTP, SSL and SSH analyzers (base/protocols/*/main.zeek).
const HTTP_PORTS: [u16; 8] = [80, 81, 631, 1080, 3128, 8000, 8080, 8888];
const SSL_PORTS: [u16; 11] = [443, 563, 585, 614, 636, 989, 990, 992, 993, 995, 5223];
const SSH_PORTS: [u16; 1] = [22];

/// The TCP service from the client's and the server's openings and the server's port.
pub fn tcp_service(client: Opening, server: Opening, server_port: u16) -> Option<&'static str> {
    let (name, answer, ports): (_, _, &[u16]) = match client {
        Opening::HttpRequest => ("http", Opening::HttpResponse, &HTTP_PORTS),
        Opening::TlsHandshake => ("ssl", Opening::TlsHandshake, &SSL_PORTS),
        Opening::Ssh => ("ssh", Opening::Ssh, &SSH_PORTS),
        _ => return None,
    };
    (server == answer || (server == Opening::Unseen && ports.contains(&server_port))).then_some(name)
}

const DNS_PORTS: [u16; 4] = [53, 137, 5353, 5355];
const DHCP_PORTS: [u16; 2] = [67, 68];

/// The UDP service: QUIC (recognised by its headers), else DNS or DHCP by port.
pub fn udp_service(quic: bool, client_port: u16, server_port: u16) -> Option<&'static str> {
    let either = |ports: &[u16]| ports.contains(&client_port) || ports.contains(&server_port);
    if quic {
        Some("quic")
    } else if either(&DNS_PORTS) {
        Some("dns")
    } else if either(&DHCP_PORTS) {
        Some("dhcp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_must_speak_the_protocol() {
        let get = opening(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n");
        let ok = opening(b"HTTP/1.1 200 OK\r\n");
        assert_eq!((get, ok), (Opening::HttpRequest, Opening::HttpResponse));
        assert_eq!(tcp_service(get, ok, 6667), Some("http"), "any port when both sides speak it");
        assert_eq!(tcp_service(get, Opening::Unseen, 6667), None, "a request nobody answered");
        assert_eq!(tcp_service(get, Opening::Unseen, 80), Some("http"), "Zeek's HTTP port: the request confirms");
        assert_eq!(tcp_service(get, opening(b"\x16\x03\x03\x00\x10"), 80), None, "the server spoke something else");
        let hello = opening(&[22, 3, 1, 2, 0, 1, 0, 1, 0xfc, 3, 3]);
        assert_eq!(hello, Opening::TlsHandshake);
        assert_eq!(tcp_service(hello, opening(&[22, 3, 3, 0, 0x5a, 2]), 4433), Some("ssl"));
        assert_eq!(tcp_service(hello, Opening::Unseen, 443), Some("ssl"));
        assert_eq!(opening(&[23, 3, 3, 0, 10]), Opening::Other, "application data is not a handshake");
        let ssh = opening(b"SSH-2.0-OpenSSH_9.6\r\n");
        assert_eq!(tcp_service(ssh, opening(b"ssh-1.99-x\r\n"), 2222), Some("ssh"));
        assert_eq!(tcp_service(opening(b"hello"), opening(b"HTTP/1.1 200 OK"), 80), None);
        assert_eq!(opening(b"GETX"), Opening::Other);
        assert_eq!(opening(b""), Opening::Other);
    }

    #[test]
    fn udp_by_headers_then_port() {
        assert_eq!(udp_service(true, 53, 443), Some("quic"));
        assert_eq!(udp_service(false, 40000, 53), Some("dns"));
        assert_eq!(udp_service(false, 5353, 5353), Some("dns"));
        assert_eq!(udp_service(false, 68, 67), Some("dhcp"));
        assert_eq!(udp_service(false, 40000, 443), None);
    }
}
