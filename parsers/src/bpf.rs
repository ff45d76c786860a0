//! `--filter 'expr'`: tcpdump's filter language, compiled and run by libpcap itself
//! (pcap_compile on a dead handle of the frame's link type, pcap_offline_filter per frame), so an
//! expression keeps exactly the packets `tcpdump -r FILE 'expr'` shows.
//!
//! libpcap is loaded when a filter is first used, not linked: building and running tailscope needs
//! no libpcap (and no development headers); a host that filters needs the shared library that
//! tcpdump already brings (libpcap.so.0.8 on Debian and Ubuntu, libpcap.so.1 elsewhere).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::Arc;

use libloading::{Library, Symbol};

const LIBRARY_NAMES: [&str; 4] = ["libpcap.so.1", "libpcap.so.0.8", "libpcap.so", "libpcap.dylib"];
/// The largest snapshot length: compiled programs then check lengths against the real caplen.
const SNAPLEN: c_int = 262_144;
const PCAP_NETMASK_UNKNOWN: c_uint = 0xffff_ffff;

#[repr(C)]
struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *mut c_void,
}

#[repr(C)]
struct Timeval {
    tv_sec: i64,
    tv_usec: i64,
}

#[repr(C)]
struct PktHdr {
    ts: Timeval,
    caplen: u32,
    len: u32,
}

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile = unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, c_uint) -> c_int;
type GetErr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type Close = unsafe extern "C" fn(*mut c_void);
type OfflineFilter = unsafe extern "C" fn(*const BpfProgram, *const PktHdr, *const u8) -> c_int;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);

struct Libpcap {
    lib: Library,
}

impl Libpcap {
    fn load() -> Result<Libpcap, String> {
        for name in LIBRARY_NAMES {
            // SAFETY: loading libpcap runs its initialisers only, which have no preconditions.
            if let Ok(lib) = unsafe { Library::new(name) } {
                return Ok(Libpcap { lib });
            }
        }
        Err("a capture filter needs libpcap (the library tcpdump uses: apt install libpcap0.8, dnf install libpcap)"
            .into())
    }

    fn sym<T>(&self, name: &[u8]) -> Result<Symbol<'_, T>, String> {
        // SAFETY: the types above are libpcap's documented C signatures for these names.
        unsafe { self.lib.get(name) }.map_err(|e| format!("libpcap without {}: {e}", String::from_utf8_lossy(name)))
    }
}

/// One expression compiled for one link type.
struct Program {
    lib: Arc<Libpcap>,
    prog: BpfProgram,
}

// SAFETY: a compiled BPF program is plain memory that pcap_offline_filter only reads.
unsafe impl Send for Program {}
unsafe impl Sync for Program {}

impl Drop for Program {
    fn drop(&mut self) {
        if let Ok(free) = self.lib.sym::<FreeCode>(b"pcap_freecode\0") {
            // SAFETY: prog was filled by pcap_compile and is freed once.
            unsafe { free(&mut self.prog) };
        }
    }
}

fn compile(lib: &Arc<Libpcap>, expr: &CStr, linktype: u32) -> Result<Program, String> {
    let open_dead = lib.sym::<OpenDead>(b"pcap_open_dead\0")?;
    let compile = lib.sym::<Compile>(b"pcap_compile\0")?;
    let geterr = lib.sym::<GetErr>(b"pcap_geterr\0")?;
    let close = lib.sym::<Close>(b"pcap_close\0")?;
    // SAFETY: libpcap's API used as documented; the dead handle is closed on every path.
    unsafe {
        let handle = open_dead(linktype as c_int, SNAPLEN);
        if handle.is_null() {
            return Err(format!("libpcap cannot open link type {linktype}"));
        }
        let mut prog = BpfProgram { bf_len: 0, bf_insns: std::ptr::null_mut() };
        let rc = compile(handle, &mut prog, expr.as_ptr(), 1, PCAP_NETMASK_UNKNOWN);
        let result = if rc != 0 {
            Err(CStr::from_ptr(geterr(handle)).to_string_lossy().into_owned())
        } else {
            Ok(Program { lib: lib.clone(), prog })
        };
        close(handle);
        result
    }
}

/// A filter expression, compiled for each link type the first time a frame of it comes.
pub struct BpfFilter {
    expr: String,
    cexpr: CString,
    lib: Arc<Libpcap>,
    programs: HashMap<u32, Result<Program, String>>,
}

impl BpfFilter {
    /// Checks the expression (compiled for Ethernet, the usual link type) so a typo is reported
    /// before any file is read.
    pub fn new(expr: &str) -> Result<BpfFilter, String> {
        let cexpr = CString::new(expr).map_err(|_| "a filter expression cannot contain a NUL byte".to_string())?;
        let lib = Arc::new(Libpcap::load()?);
        let ethernet = compile(&lib, &cexpr, 1).map_err(|e| format!("filter {expr:?}: {e}"))?;
        let mut programs = HashMap::new();
        programs.insert(1, Ok(ethernet));
        Ok(BpfFilter { expr: expr.to_string(), cexpr, lib, programs })
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// Does the frame pass? An expression that cannot apply to the frame's link type (e.g. `ether
    /// host` on raw IP) is an error naming the link type, as tcpdump would give.
    pub fn matches(&mut self, linktype: u32, data: &[u8], wire_len: u32) -> Result<bool, String> {
        let (lib, cexpr) = (&self.lib, &self.cexpr);
        let program = self.programs.entry(linktype).or_insert_with(|| compile(lib, cexpr, linktype));
        let program = program.as_ref().map_err(|e| format!("filter {:?} on link type {linktype}: {e}", self.expr))?;
        let filter = program.lib.sym::<OfflineFilter>(b"pcap_offline_filter\0")?;
        let hdr = PktHdr {
            ts: Timeval { tv_sec: 0, tv_usec: 0 },
            caplen: data.len() as u32,
            len: wire_len.max(data.len() as u32),
        };
        // SAFETY: the program was compiled by pcap_compile; hdr.caplen bytes are readable at data.
        Ok(unsafe { filter(&program.prog, &hdr, data.as_ptr()) } != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 + TCP to port `dport`.
    fn tcp_frame(dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12] = 0x08; // IPv4
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[46] = 0x50;
        f
    }

    #[test]
    fn tcpdump_semantics() {
        // libpcap comes with tcpdump, which the project's setup installs for the tests
        let mut f = BpfFilter::new("tcp port 443 and host 10.0.0.2").expect("libpcap");
        assert!(f.matches(1, &tcp_frame(443), 54).unwrap());
        assert!(!f.matches(1, &tcp_frame(80), 54).unwrap());
        assert!(BpfFilter::new("tcp port").err().unwrap().contains("tcp port"));
        let mut ether = BpfFilter::new("ether host 00:11:22:33:44:55").unwrap();
        assert!(ether.matches(101, &tcp_frame(443)[14..], 40).unwrap_err().contains("link type 101"));
    }
}
