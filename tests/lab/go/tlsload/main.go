// tlsload: Go's own HTTPS stack (crypto/tls + net/http, standard library only) as a second TCP
// stack for the lab: a server answering GET /bytes?n=N with N bytes and a client sending a plan of
// requests over one connection (HTTP/1.1 or HTTP/2), logging each request's truth (start, first
// byte, end, size) as JSON lines. Go's default TLS config offers the post-quantum key share
// X25519MLKEM768 (Go >= 1.24), so its ClientHello is ~1.5 kB: two segments at MTU 1500.
//
//	tlsload -listen ADDR [-cc cubic]             (server only)
//	tlsload -connect ADDR -proto h2 -sizes 1000,175000 -gap 50ms -conns 2 > truth.jsonl
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// congestion: the TCP congestion control every socket gets (-cc; empty: the namespace's
// default). Set per socket as the Python lab apps do: a network namespace may only switch its
// default to the host's allowed list, a socket of a privileged process to any loaded one.
var congestion string

func setCC(network, address string, c syscall.RawConn) error {
	if congestion == "" {
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, congestion)
	}); err != nil {
		return err
	}
	return serr
}

func selfSigned(name string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

var filler = make([]byte, 64<<10)

func serve(addr, name string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k := min(n, len(filler))
			if _, err := w.Write(filler[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	srv := &http.Server{
		Addr:      addr,
		Handler:   mux,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{selfSigned(name)}},
	}
	// accepted connections inherit the listener's congestion control
	ln, err := (&net.ListenConfig{Control: setCC}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.ServeTLS(ln, "", ""))
}

// One request as the client saw it: the truth a capture's queries are scored against.
type record struct {
	Conn      int    `json:"conn"`
	Index     int    `json:"index"`
	Proto     string `json:"proto"`
	Size      int    `json:"size"`
	StartNs   int64  `json:"start_ns"`
	FirstNs   int64  `json:"first_byte_ns"`
	EndNs     int64  `json:"end_ns"`
	LocalPort int    `json:"local_port"`
	Error     string `json:"error,omitempty"`
}

func client(addr, name, proto string, sizes []int, gap time.Duration, conn int, out *json.Encoder) {
	var local int
	dial := func(network, a string) (net.Conn, error) {
		c, err := (&net.Dialer{Control: setCC}).Dial(network, a)
		if err == nil {
			local = c.LocalAddr().(*net.TCPAddr).Port
		}
		return c, err
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{ServerName: name, InsecureSkipVerify: true},
		Dial:              dial,
		ForceAttemptHTTP2: proto == "h2",
		MaxConnsPerHost:   1,
	}
	if proto == "h1" {
		// A non-nil empty map turns HTTP/2 off (net/http's documented switch).
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	c := &http.Client{Transport: tr}
	for i, n := range sizes {
		rec := record{Conn: conn, Index: i, Proto: proto, Size: n, StartNs: time.Now().UnixNano()}
		resp, err := c.Get(fmt.Sprintf("https://%s/bytes?n=%d", addr, n))
		if err == nil {
			rec.FirstNs = time.Now().UnixNano()
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			rec.Proto = resp.Proto
		}
		rec.EndNs = time.Now().UnixNano()
		rec.LocalPort = local
		if err != nil {
			rec.Error = err.Error()
		}
		out.Encode(rec)
		time.Sleep(gap)
	}
	tr.CloseIdleConnections()
}

func main() {
	listen := flag.String("listen", "", "serve on this address")
	connect := flag.String("connect", "", "send the plan to this address")
	name := flag.String("name", "stacks.test", "server name (certificate, SNI)")
	proto := flag.String("proto", "h2", "h1 or h2")
	sizesFlag := flag.String("sizes", "1000,175000,20000", "response sizes, one request each, in order")
	gap := flag.Duration("gap", 50*time.Millisecond, "pause after each response")
	conns := flag.Int("conns", 1, "connections, one after the other, each sending the whole plan")
	flag.StringVar(&congestion, "cc", "", "TCP congestion control of every socket (default: the system's)")
	flag.Parse()
	if *listen != "" {
		serve(*listen, *name)
		return
	}
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			log.Fatal(err)
		}
		sizes = append(sizes, n)
	}
	out := json.NewEncoder(os.Stdout)
	for i := 0; i < *conns; i++ {
		client(*connect, *name, *proto, sizes, *gap, i, out)
	}
}
