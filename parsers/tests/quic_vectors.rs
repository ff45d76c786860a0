//! RFC 9001 Appendix A (QUIC v1) and RFC 9369 Appendix A (QUIC v2) sample packet protection.
//! Byte strings are the RFCs' (for v2, as reproduced in several implementations' test suites);
//! A.5 (ChaCha20, 1-RTT) is not covered: only Initial packets are decrypted here.

use tailscope_parsers::quic::{
    self, initial_secrets, packet_key_material, parse_client_hello, verify_retry, InitialDecryptor, PacketType,
    QuicError, RetryCheck,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    assert!(s.len().is_multiple_of(2));
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

const DCID: &str = "8394c8f03e515708";

/// RFC 9001 A.2: the CRYPTO frame of the client Initial (padded to 1162 bytes).
const CLIENT_CRYPTO_FRAME: &str = "
060040f1010000ed0303ebf8fa56f129 39b9584a3896472ec40bb863cfd3e868
04fe3a47f06a2b69484c000004130113 02010000c000000010000e00000b6578
616d706c652e636f6dff01000100000a 00080006001d00170018001000070005
04616c706e0005000501000000000033 00260024001d00209370b2c9caa47fba
baf4559fedba753de171fa71f50f1ce1 5d43e994ec74d748002b000302030400
0d0010000e0403050306030203080408 050806002d00020101001c0002400100
3900320408ffffffffffffffff050480 00ffff07048000ffff08011001048000
75300901100f088394c8f03e51570806 048000ffff";

/// RFC 9001 A.3: the server Initial payload (ACK, CRYPTO).
const SERVER_PAYLOAD: &str = "
02000000000600405a020000560303ee fce7f7b37ba1d1632e96677825ddf739
88cfc79825df566dc5430b9a045a1200 130100002e00330024001d00209d3c94
0d89690b84d08a60993c144eca684d10 81287c834d5311bcf32bb9da1a002b00
020304";

const V1_CLIENT_HEADER: &str = "c300000001088394c8f03e5157080000449e00000002";
const V1_CLIENT_PACKET: &str = "
c000000001088394c8f03e5157080000 449e7b9aec34d1b1c98dd7689fb8ec11
d242b123dc9bd8bab936b47d92ec356c 0bab7df5976d27cd449f63300099f399
1c260ec4c60d17b31f8429157bb35a12 82a643a8d2262cad67500cadb8e7378c
8eb7539ec4d4905fed1bee1fc8aafba1 7c750e2c7ace01e6005f80fcb7df6212
30c83711b39343fa028cea7f7fb5ff89 eac2308249a02252155e2347b63d58c5
457afd84d05dfffdb20392844ae81215 4682e9cf012f9021a6f0be17ddd0c208
4dce25ff9b06cde535d0f920a2db1bf3 62c23e596d11a4f5a6cf3948838a3aec
4e15daf8500a6ef69ec4e3feb6b1d98e 610ac8b7ec3faf6ad760b7bad1db4ba3
485e8a94dc250ae3fdb41ed15fb6a8e5 eba0fc3dd60bc8e30c5c4287e53805db
059ae0648db2f64264ed5e39be2e20d8 2df566da8dd5998ccabdae053060ae6c
7b4378e846d29f37ed7b4ea9ec5d82e7 961b7f25a9323851f681d582363aa5f8
9937f5a67258bf63ad6f1a0b1d96dbd4 faddfcefc5266ba6611722395c906556
be52afe3f565636ad1b17d508b73d874 3eeb524be22b3dcbc2c7468d54119c74
68449a13d8e3b95811a198f3491de3e7 fe942b330407abf82a4ed7c1b311663a
c69890f4157015853d91e923037c227a 33cdd5ec281ca3f79c44546b9d90ca00
f064c99e3dd97911d39fe9c5d0b23a22 9a234cb36186c4819e8b9c5927726632
291d6a418211cc2962e20fe47feb3edf 330f2c603a9d48c0fcb5699dbfe58964
25c5bac4aee82e57a85aaf4e2513e4f0 5796b07ba2ee47d80506f8d2c25e50fd
14de71e6c418559302f939b0e1abd576 f279c4b2e0feb85c1f28ff18f58891ff
ef132eef2fa09346aee33c28eb130ff2 8f5b766953334113211996d20011a198
e3fc433f9f2541010ae17c1bf202580f 6047472fb36857fe843b19f5984009dd
c324044e847a4f4a0ab34f719595de37 252d6235365e9b84392b061085349d73
203a4a13e96f5432ec0fd4a1ee65accd d5e3904df54c1da510b0ff20dcc0c77f
cb2c0e0eb605cb0504db87632cf3d8b4 dae6e705769d1de354270123cb11450e
fc60ac47683d7b8d0f811365565fd98c 4c8eb936bcab8d069fc33bd801b03ade
a2e1fbc5aa463d08ca19896d2bf59a07 1b851e6c239052172f296bfb5e724047
90a2181014f3b94a4e97d117b4381303 68cc39dbb2d198065ae3986547926cd2
162f40a29f0c3c8745c0f50fba3852e5 66d44575c29d39a03f0cda721984b6f4
40591f355e12d439ff150aab7613499d bd49adabc8676eef023b15b65bfc5ca0
6948109f23f350db82123535eb8a7433 bdabcb909271a6ecbcb58b936a88cd4e
8f2e6ff5800175f113253d8fa9ca8885 c2f552e657dc603f252e1a8e308f76f0
be79e2fb8f5d5fbbe2e30ecadd220723 c8c0aea8078cdfcb3868263ff8f09400
54da48781893a7e49ad5aff4af300cd8 04a6b6279ab3ff3afb64491c85194aab
760d58a606654f9f4400e8b38591356f bf6425aca26dc85244259ff2b19c41b9
f96f3ca9ec1dde434da7d2d392b905dd f3d1f9af93d1af5950bd493f5aa731b4
056df31bd267b6b90a079831aaf579be 0a39013137aac6d404f518cfd4684064
7e78bfe706ca4cf5e9c5453e9f7cfd2b 8b4c8d169a44e55c88d4a9a7f9474241
e221af44860018ab0856972e194cd934";

const V1_SERVER_HEADER: &str = "c1000000010008f067a5502a4262b50040750001";
const V1_SERVER_PACKET: &str = "
cf000000010008f067a5502a4262b500 4075c0d95a482cd0991cd25b0aac406a
5816b6394100f37a1c69797554780bb3 8cc5a99f5ede4cf73c3ec2493a1839b3
dbcba3f6ea46c5b7684df3548e7ddeb9 c3bf9c73cc3f3bded74b562bfb19fb84
022f8ef4cdd93795d77d06edbb7aaf2f 58891850abbdca3d20398c276456cbc4
2158407dd074ee";

const V1_RETRY: &str = "
ff000000010008f067a5502a4262b574 6f6b656e04a265ba2eff4d829058fb3f
0f2496ba";

const V2_CLIENT_HEADER: &str = "d36b3343cf088394c8f03e5157080000449e00000002";
const V2_CLIENT_PACKET: &str = "
d76b3343cf088394c8f03e5157080000449ea0c95e82ffe67b6abcdb4298b485
dd04de806071bf03dceebfa162e75d6c96058bdbfb127cdfcbf903388e99ad04
9f9a3dd4425ae4d0992cfff18ecf0fdb5a842d09747052f17ac2053d21f57c5d
250f2c4f0e0202b70785b7946e992e58a59ac52dea6774d4f03b55545243cf1a
12834e3f249a78d395e0d18f4d766004f1a2674802a747eaa901c3f10cda5500
cb9122faa9f1df66c392079a1b40f0de1c6054196a11cbea40afb6ef5253cd68
18f6625efce3b6def6ba7e4b37a40f7732e093daa7d52190935b8da58976ff33
12ae50b187c1433c0f028edcc4c2838b6a9bfc226ca4b4530e7a4ccee1bfa2a3
d396ae5a3fb512384b2fdd851f784a65e03f2c4fbe11a53c7777c023462239dd
6f7521a3f6c7d5dd3ec9b3f233773d4b46d23cc375eb198c63301c21801f6520
bcfb7966fc49b393f0061d974a2706df8c4a9449f11d7f3d2dcbb90c6b877045
636e7c0c0fe4eb0f697545460c806910d2c355f1d253bc9d2452aaa549e27a1f
ac7cf4ed77f322e8fa894b6a83810a34b361901751a6f5eb65a0326e07de7c12
16ccce2d0193f958bb3850a833f7ae432b65bc5a53975c155aa4bcb4f7b2c4e5
4df16efaf6ddea94e2c50b4cd1dfe06017e0e9d02900cffe1935e0491d77ffb4
fdf85290fdd893d577b1131a610ef6a5c32b2ee0293617a37cbb08b847741c3b
8017c25ca9052ca1079d8b78aebd47876d330a30f6a8c6d61dd1ab5589329de7
14d19d61370f8149748c72f132f0fc99f34d766c6938597040d8f9e2bb522ff9
9c63a344d6a2ae8aa8e51b7b90a4a806105fcbca31506c446151adfeceb51b91
abfe43960977c87471cf9ad4074d30e10d6a7f03c63bd5d4317f68ff325ba3bd
80bf4dc8b52a0ba031758022eb025cdd770b44d6d6cf0670f4e990b22347a7db
848265e3e5eb72dfe8299ad7481a408322cac55786e52f633b2fb6b614eaed18
d703dd84045a274ae8bfa73379661388d6991fe39b0d93debb41700b41f90a15
c4d526250235ddcd6776fc77bc97e7a417ebcb31600d01e57f32162a8560cacc
7e27a096d37a1a86952ec71bd89a3e9a30a2a26162984d7740f81193e8238e61
f6b5b984d4d3dfa033c1bb7e4f0037febf406d91c0dccf32acf423cfa1e70710
10d3f270121b493ce85054ef58bada42310138fe081adb04e2bd901f2f13458b
3d6758158197107c14ebb193230cd1157380aa79cae1374a7c1e5bbcb80ee23e
06ebfde206bfb0fcbc0edc4ebec309661bdd908d532eb0c6adc38b7ca7331dce
8dfce39ab71e7c32d318d136b6100671a1ae6a6600e3899f31f0eed19e3417d1
34b90c9058f8632c798d4490da4987307cba922d61c39805d072b589bd52fdf1
e86215c2d54e6670e07383a27bbffb5addf47d66aa85a0c6f9f32e59d85a44dd
5d3b22dc2be80919b490437ae4f36a0ae55edf1d0b5cb4e9a3ecabee93dfc6e3
8d209d0fa6536d27a5d6fbb17641cde27525d61093f1b28072d111b2b4ae5f89
d5974ee12e5cf7d5da4d6a31123041f33e61407e76cffcdcfd7e19ba58cf4b53
6f4c4938ae79324dc402894b44faf8afbab35282ab659d13c93f70412e85cb19
9a37ddec600545473cfb5a05e08d0b209973b2172b4d21fb69745a262ccde96b
a18b2faa745b6fe189cf772a9f84cbfc";

const V2_SERVER_HEADER: &str = "d16b3343cf0008f067a5502a4262b50040750001";
const V2_SERVER_PACKET: &str = "
dc6b3343cf0008f067a5502a4262b5004075d92faaf16f05d8a4398c47089698
baeea26b91eb761d9b89237bbf87263017915358230035f7fd3945d88965cf17
f9af6e16886c61bfc703106fbaf3cb4cfa52382dd16a393e42757507698075b2
c984c707f0a0812d8cd5a6881eaf21ceda98f4bd23f6fe1a3e2c43edd9ce7ca8
4bed8521e2e140";

const V2_RETRY: &str = "cf6b3343cf0008f067a5502a4262b5746f6b656ec8646ce8bfe33952d955543665dcc7b6";

struct Keys {
    initial: &'static str,
    client: &'static str,
    server: &'static str,
    client_kih: [&'static str; 3],
    server_kih: [&'static str; 3],
}

fn check_keys(version: u32, k: &Keys) {
    let s = initial_secrets(version, &hex(DCID)).unwrap();
    assert_eq!(s.initial.to_vec(), hex(k.initial), "initial_secret {version:#x}");
    assert_eq!(s.client.to_vec(), hex(k.client), "client_initial_secret {version:#x}");
    assert_eq!(s.server.to_vec(), hex(k.server), "server_initial_secret {version:#x}");
    for (secret, kih) in [(&s.client, &k.client_kih), (&s.server, &k.server_kih)] {
        let m = packet_key_material(version, secret).unwrap();
        assert_eq!(m.key.to_vec(), hex(kih[0]));
        assert_eq!(m.iv.to_vec(), hex(kih[1]));
        assert_eq!(m.hp.to_vec(), hex(kih[2]));
    }
}

#[test]
fn rfc9001_a1_keys() {
    check_keys(
        1,
        &Keys {
            initial: "7db5df06e7a69e432496adedb00851923595221596ae2ae9fb8115c1e9ed0a44",
            client: "c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea",
            server: "3c199828fd139efd216c155ad844cc81fb82fa8d7446fa7d78be803acdda951b",
            client_kih: [
                "1f369613dd76d5467730efcbe3b1a22d",
                "fa044b2f42a3fd3b46fb255c",
                "9f50449e04a0e810283a1e9933adedd2",
            ],
            server_kih: [
                "cf3a5331653c364c88f0f379b6067e37",
                "0ac1493ca1905853b0bba03e",
                "c206b8d9b9f0f37644430b490eeaa314",
            ],
        },
    );
}

#[test]
fn rfc9369_a1_keys() {
    check_keys(
        0x6b3343cf,
        &Keys {
            initial: "2062e8b3cd8d52092614b8071d0aa1fb7c2e3ac193f78b280e72d8f5751f6aba",
            client: "14ec9d6eb9fd7af83bf5a668bc17a7e283766aade7ecd0891f70f9ff7f4bf47b",
            server: "0263db1782731bf4588e7e4d93b7463907cb8cd8200b5da55a8bd488eafc37c1",
            client_kih: [
                "8b1a0bc121284290a29e0971b5cd045d",
                "91f73e2351d8fa91660e909f",
                "45b95e15235d6f45a6b19cbcb0294ba9",
            ],
            server_kih: [
                "82db637861d55e1d011f19ea71d5d2a7",
                "dd13c276499c0249d3310652",
                "edf6d05c83121201b436e16877593c3a",
            ],
        },
    );
}

fn check_client_initial(version: u32, packet: &str, header: &str) {
    let pkt = hex(packet);
    assert_eq!(pkt.len(), 1200);
    let dg = quic::parse_datagram(&pkt, 0);
    assert_eq!(dg.error, None);
    assert_eq!(dg.packets.len(), 1);
    let h = &dg.packets[0];
    assert_eq!(h.ty, PacketType::Initial);
    assert_eq!(h.version, version);
    assert_eq!(h.dcid, hex(DCID).as_slice());
    assert_eq!(h.length, Some(1182));

    let mut d = InitialDecryptor::new(version, h.dcid).unwrap();
    let open = d.open(h.bytes, true).unwrap();
    assert_eq!(open.packet_number, 2);
    assert_eq!(open.pn_len, 4);
    assert_eq!(open.header, hex(header));
    let mut expected = hex(CLIENT_CRYPTO_FRAME);
    expected.resize(1162, 0);
    assert_eq!(open.plaintext, expected);
    assert_eq!(open.frames.crypto.len(), 1);
    assert_eq!(open.frames.padding, 1162 - hex(CLIENT_CRYPTO_FRAME).len());
    assert!(!open.frames.malformed && open.frames.unknown_frame.is_none());
    let (off, data) = open.crypto_data().next().unwrap();
    assert_eq!(off, 0);
    let ch = parse_client_hello(data).unwrap();
    assert_eq!(ch.sni.as_deref(), Some("example.com"));
    assert_eq!(ch.alpn, vec!["alpn"]);
    assert!(!ch.truncated);

    // The server's keys cannot open it; one flipped bit anywhere breaks it.
    assert_eq!(d.open(h.bytes, false).unwrap_err(), QuicError::DecryptFailed);
    for at in [0usize, 5, 17, 18, 30, 600, 1199] {
        let mut bad = pkt.clone();
        bad[at] ^= 0x01;
        let mut d = InitialDecryptor::new(version, &hex(DCID)).unwrap();
        assert!(d.open(&bad, true).is_err(), "bit flipped at {at} went unnoticed");
    }
}

fn check_server_initial(version: u32, packet: &str, header: &str) {
    let pkt = hex(packet);
    let dg = quic::parse_datagram(&pkt, 0);
    assert_eq!(dg.error, None);
    let h = &dg.packets[0];
    assert_eq!(h.ty, PacketType::Initial);
    assert_eq!(h.scid, hex("f067a5502a4262b5").as_slice());
    assert!(h.dcid.is_empty());
    let mut d = InitialDecryptor::new(version, &hex(DCID)).unwrap();
    let open = d.open(h.bytes, false).unwrap();
    assert_eq!(open.packet_number, 1);
    assert_eq!(open.pn_len, 2);
    assert_eq!(open.header, hex(header));
    assert_eq!(open.plaintext, hex(SERVER_PAYLOAD));
    assert_eq!(open.frames.acks.len(), 1);
    assert_eq!(open.frames.acks[0].largest, 0);
    assert_eq!(open.frames.crypto.len(), 1);
    assert_eq!(open.frames.crypto[0].len, 90);
    assert!(!open.frames.malformed);
    // A ServerHello is not a ClientHello.
    assert!(parse_client_hello(open.crypto_data().next().unwrap().1).is_none());
}

fn check_retry(version: u32, packet: &str) {
    let pkt = hex(packet);
    let dg = quic::parse_datagram(&pkt, 0);
    let h = &dg.packets[0];
    assert_eq!(h.ty, PacketType::Retry);
    assert_eq!(h.version, version);
    assert_eq!(h.token, b"token");
    assert_eq!(h.scid, hex("f067a5502a4262b5").as_slice());
    assert_eq!(verify_retry(h.bytes, &hex(DCID)), Ok(RetryCheck::Valid));
    assert_eq!(verify_retry(h.bytes, &hex("8394c8f03e515709")), Ok(RetryCheck::Invalid));
    let mut bad = pkt.clone();
    bad[20] ^= 0x80;
    assert_eq!(verify_retry(&bad, &hex(DCID)), Ok(RetryCheck::Invalid));
}

#[test]
fn rfc9001_a2_client_initial() {
    check_client_initial(1, V1_CLIENT_PACKET, V1_CLIENT_HEADER);
}

#[test]
fn rfc9001_a3_server_initial() {
    check_server_initial(1, V1_SERVER_PACKET, V1_SERVER_HEADER);
}

#[test]
fn rfc9001_a4_retry() {
    check_retry(1, V1_RETRY);
}

#[test]
fn rfc9369_a2_client_initial() {
    check_client_initial(0x6b3343cf, V2_CLIENT_PACKET, V2_CLIENT_HEADER);
}

#[test]
fn rfc9369_a3_server_initial() {
    check_server_initial(0x6b3343cf, V2_SERVER_PACKET, V2_SERVER_HEADER);
}

#[test]
fn rfc9369_a4_retry() {
    check_retry(0x6b3343cf, V2_RETRY);
}

#[test]
fn versions_do_not_mix() {
    let v1 = hex(V1_CLIENT_PACKET);
    let mut d = InitialDecryptor::new(0x6b3343cf, &hex(DCID)).unwrap();
    assert_eq!(d.open(&v1, true).unwrap_err(), QuicError::VersionMismatch { expected: 0x6b3343cf, got: 1 });
    // v1 bytes relabelled as draft-29 use draft-29's salt: they do not open.
    let mut d29 = v1.clone();
    d29[1..5].copy_from_slice(&0xff00001du32.to_be_bytes());
    let mut d = InitialDecryptor::new(0xff00001d, &hex(DCID)).unwrap();
    assert_eq!(d.open(&d29, true).unwrap_err(), QuicError::DecryptFailed);
    // ... and the v1 Retry is not valid as a v2 one.
    let mut r = hex(V1_RETRY);
    r[1..5].copy_from_slice(&0x6b3343cfu32.to_be_bytes());
    r[0] = 0xcf; // v2's Retry type bits
    assert_eq!(verify_retry(&r, &hex(DCID)), Ok(RetryCheck::Invalid));
    assert!(InitialDecryptor::new(0x51303436, &hex(DCID)).is_err());
    assert!(InitialDecryptor::new(0x54303530 + 0x0100, &hex(DCID)).is_err()); // T060: no keys known
}

/// Protect an Initial packet (client direction) as RFC 9001 §5 says, with the keys of
/// `keys_version` and `wire_version` in the header: what a client does.
fn seal(keys_version: u32, wire_version: u32, dcid: &[u8], pn: u64, frames: &[u8]) -> Vec<u8> {
    seal_pn(keys_version, wire_version, dcid, pn, 4, frames)
}

/// As [`seal`], with the packet number sent on `pn_len` bytes (its low bytes).
fn seal_pn(keys_version: u32, wire_version: u32, dcid: &[u8], pn: u64, pn_len: usize, frames: &[u8]) -> Vec<u8> {
    use aes::cipher::{BlockEncrypt, KeyInit};
    use aes_gcm::aead::AeadInPlace;
    let s = initial_secrets(keys_version, dcid).unwrap();
    let m = packet_key_material(keys_version, &s.client).unwrap();
    let mut payload = frames.to_vec();
    payload.resize(payload.len().max(1162), 0);
    let len = pn_len + payload.len() + 16;
    let mut p = vec![0xc0u8 | (pn_len as u8 - 1)];
    p.extend(wire_version.to_be_bytes());
    p.push(dcid.len() as u8);
    p.extend(dcid);
    p.extend([0, 0]); // SCID, token: empty
    p.extend((0x4000u16 | len as u16).to_be_bytes());
    let pn_offset = p.len();
    p.extend(&pn.to_be_bytes()[8 - pn_len..]);
    let mut nonce = m.iv;
    for (i, b) in pn.to_be_bytes().iter().enumerate() {
        nonce[4 + i] ^= b;
    }
    let aead = aes_gcm::Aes128Gcm::new(&m.key.into());
    let tag = aead.encrypt_in_place_detached(&nonce.into(), &p, &mut payload).unwrap();
    p.extend(&payload);
    p.extend(tag.as_slice());
    let mut mask = [0u8; 16];
    mask.copy_from_slice(&p[pn_offset + 4..pn_offset + 20]);
    let mut block = mask.into();
    aes::Aes128::new(&m.hp.into()).encrypt_block(&mut block);
    let mask: [u8; 16] = block.into();
    p[0] ^= mask[0] & 0x0f;
    for i in 0..pn_len {
        p[pn_offset + i] ^= mask[1 + i];
    }
    p
}

fn crypto_frame(offset: u64, data: &[u8]) -> Vec<u8> {
    let mut f = vec![0x06, 0x80];
    f.extend(&(offset as u32 & 0x3fff_ffff).to_be_bytes()[1..]);
    f.extend((0x4000u16 | data.len() as u16).to_be_bytes());
    f.extend(data);
    f
}

#[test]
fn seal_matches_rfc9001_a2() {
    // The helper itself, against the RFC: same packet byte for byte.
    assert_eq!(seal(1, 1, &hex(DCID), 2, &hex(CLIENT_CRYPTO_FRAME)), hex(V1_CLIENT_PACKET));
}

#[test]
fn greased_version_initials_open_with_draft29_or_v1_keys() {
    let hello = crypto_frame(0, &hex(CLIENT_CRYPTO_FRAME)[4..]);
    for keys in [0xff00001du32, 1] {
        let pkt = seal(keys, 0x1a2a3a4a, &hex(DCID), 0, &hello);
        let dg = quic::parse_datagram(&pkt, 0);
        assert_eq!(dg.packets[0].ty, PacketType::Initial, "a greased version reads as v1 when it parses");
        let mut d = InitialDecryptor::new(0x1a2a3a4a, &hex(DCID)).unwrap();
        let open = d.open(dg.packets[0].bytes, true).unwrap();
        let (_, data) = open.crypto_data().next().unwrap();
        assert_eq!(parse_client_hello(data).unwrap().sni.as_deref(), Some("example.com"));
    }
}

#[test]
fn client_hello_split_over_initials_out_of_order() {
    let ch = hex(&CLIENT_CRYPTO_FRAME[CLIENT_CRYPTO_FRAME.find("010000ed").unwrap()..]);
    let dcid = hex("0011223344556677");
    // Three packets: [100..], [0..40] + [40..100] (two frames in one packet), sent last-first.
    let p3 = seal(1, 1, &dcid, 2, &crypto_frame(100, &ch[100..]));
    let mut f2 = crypto_frame(0, &ch[..40]);
    f2.extend(crypto_frame(40, &ch[40..100]));
    let p1 = seal(1, 1, &dcid, 1, &f2);
    let mut d = InitialDecryptor::new(1, &dcid).unwrap();
    let mut stream = quic::CryptoReassembler::default();
    for p in [&p3, &p1] {
        let open = d.open(p, true).unwrap();
        for (off, data) in open.crypto_data() {
            stream.insert(off, data);
        }
    }
    assert_eq!(stream.contiguous(), ch.as_slice());
    let hello = parse_client_hello(stream.contiguous()).unwrap();
    assert_eq!(hello.sni.as_deref(), Some("example.com"));
    assert!(!hello.truncated);
    // With only the first two fragments, the SNI (early in the message) is already there.
    let partial = parse_client_hello(&ch[..100]).unwrap();
    assert!(partial.truncated);
    assert_eq!(partial.sni.as_deref(), Some("example.com"));
}

#[test]
fn packet_numbers_follow_the_largest_seen() {
    // 1-byte packet numbers past 255 decode against the largest seen (RFC 9000 A.3); a client
    // that restarted from a small number is still opened (the number as sent is tried second).
    let dcid = hex("0102030405060708");
    let mut d = InitialDecryptor::new(1, &dcid).unwrap();
    for pn in 250u64..=260 {
        let open = d.open(&seal_pn(1, 1, &dcid, pn, 1, &[0x01]), true).unwrap();
        assert_eq!((open.packet_number, open.pn_len), (pn, 1));
        assert!(open.frames.ping);
    }
    assert_eq!(d.open(&seal_pn(1, 1, &dcid, 3, 1, &[0x01]), true).unwrap().packet_number, 3);
    assert_eq!(d.open(&seal_pn(1, 1, &dcid, 0x1_2345, 2, &[0x01]), false).unwrap_err(), QuicError::DecryptFailed);
    let mut d = InitialDecryptor::new(1, &dcid).unwrap();
    assert_eq!(d.open(&seal_pn(1, 1, &dcid, 0x1234_5678, 4, &[0x01]), true).unwrap().packet_number, 0x1234_5678);
    assert_eq!(d.open(&seal_pn(1, 1, &dcid, 0x1234_5679, 2, &[0x01]), true).unwrap().packet_number, 0x1234_5679);
}

#[test]
fn every_truncation_and_corruption_is_an_error_not_a_panic() {
    for (v, p) in [
        (1u32, V1_CLIENT_PACKET),
        (1, V1_SERVER_PACKET),
        (0x6b3343cf, V2_CLIENT_PACKET),
        (0x6b3343cf, V2_SERVER_PACKET),
        (1, V1_RETRY),
        (0x6b3343cf, V2_RETRY),
    ] {
        let pkt = hex(p);
        let mut d = InitialDecryptor::new(v, &hex(DCID)).unwrap();
        for n in 0..pkt.len() {
            let cut = &pkt[..n];
            let _ = quic::parse_datagram(cut, 8);
            let _ = d.open(cut, true);
            let _ = d.open(cut, false);
            let _ = verify_retry(cut, &hex(DCID));
        }
        // Deterministic pseudo-random corruption (xorshift).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut bad = pkt.clone();
            let at = (x as usize) % bad.len();
            bad[at] = (x >> 32) as u8;
            if x & 1 == 0 && at + 1 < bad.len() {
                bad.truncate(at + 1 + ((x >> 40) as usize % (bad.len() - at)));
            }
            let dg = quic::parse_datagram(&bad, (x >> 8) as usize % 21);
            for h in &dg.packets {
                let _ = d.open(h.bytes, true);
                let _ = d.open(h.bytes, false);
                let _ = verify_retry(h.bytes, &hex(DCID));
            }
            let _ = parse_client_hello(&bad);
            let _ = quic::frames::parse_frames(&bad);
        }
    }
    // Decrypted garbage: valid packets whose frames are random bytes.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let dcid = hex("0a0b0c0d");
    for _ in 0..300 {
        let mut frames = Vec::new();
        for _ in 0..40 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            frames.extend(x.to_le_bytes());
        }
        let mut d = InitialDecryptor::new(1, &dcid).unwrap();
        let open = d.open(&seal(1, 1, &dcid, 0, &frames), true).unwrap();
        let mut stream = quic::CryptoReassembler::default();
        for (off, data) in open.crypto_data() {
            stream.insert(off, data);
        }
        let _ = parse_client_hello(stream.contiguous());
    }
}

#[test]
fn client_initial_after_a_retry_rekeys() {
    // The client Initial of A.2 re-sent after a Retry would carry the Retry's SCID as DCID and
    // be protected with keys from it; a decryptor made for another DCID follows the packet.
    let pkt = hex(V1_CLIENT_PACKET);
    let mut d = InitialDecryptor::new(1, &hex("0011223344556677")).unwrap();
    let open = d.open(&pkt, true).unwrap();
    assert!(open.rekeyed);
    assert_eq!(d.current_dcid(), hex(DCID).as_slice());
    assert_eq!(d.original_dcid(), hex("0011223344556677").as_slice());
    // The server's Initial now opens with the new keys.
    assert!(d.open(&hex(V1_SERVER_PACKET), false).is_ok());
    // A client Initial that no keys open leaves the keys in use alone.
    let mut bad = pkt.clone();
    bad[6] ^= 1; // another DCID, and the AAD no longer matches
    assert_eq!(d.open(&bad, true).unwrap_err(), QuicError::DecryptFailed);
    assert_eq!(d.current_dcid(), hex(DCID).as_slice());
    // Explicit switch on a Retry.
    let mut d = InitialDecryptor::new(1, &hex("0011223344556677")).unwrap();
    assert_eq!(d.open(&hex(V1_SERVER_PACKET), false).unwrap_err(), QuicError::DecryptFailed);
    d.on_retry(&hex(DCID)).unwrap();
    assert!(d.open(&hex(V1_SERVER_PACKET), false).is_ok());
}
