// h3load: quic-go's HTTP/3 client and server (github.com/quic-go/quic-go/http3), a second QUIC
// stack beside aioquic for the lab: the same plan and per-request log as tlsload.
//
//	h3load -listen ADDR
//	h3load -connect ADDR -sizes 1000,175000 -gap 50ms -conns 2 > truth.jsonl
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
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

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

type record struct {
	Conn    int    `json:"conn"`
	Index   int    `json:"index"`
	Proto   string `json:"proto"`
	Size    int    `json:"size"`
	StartNs int64  `json:"start_ns"`
	FirstNs int64  `json:"first_byte_ns"`
	EndNs   int64  `json:"end_ns"`
	// the connection's UDP port: the lab joins the log to the capture's flow by it
	LocalPort int    `json:"local_port"`
	Error     string `json:"error,omitempty"`
}

func main() {
	listen := flag.String("listen", "", "serve on this UDP address")
	connect := flag.String("connect", "", "send the plan to this address")
	name := flag.String("name", "stacks.test", "server name (certificate, SNI)")
	sizesFlag := flag.String("sizes", "1000,175000,20000", "response sizes, one request each, in order")
	gap := flag.Duration("gap", 50*time.Millisecond, "pause after each response")
	conns := flag.Int("conns", 1, "connections, one after the other, each sending the whole plan")
	flag.Parse()
	if *listen != "" {
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
		srv := &http3.Server{
			Addr:      *listen,
			Handler:   mux,
			TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{selfSigned(*name)}}),
		}
		log.Fatal(srv.ListenAndServe())
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
	for c := 0; c < *conns; c++ {
		// One UDP socket per connection, opened here so its port is known (http3's own dial
		// hides it).
		var local int
		dial := func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			raddr, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			udp, err := net.ListenUDP("udp", nil)
			if err != nil {
				return nil, err
			}
			local = udp.LocalAddr().(*net.UDPAddr).Port
			return (&quic.Transport{Conn: udp}).DialEarly(ctx, raddr, tlsCfg, cfg)
		}
		tr := &http3.Transport{TLSClientConfig: &tls.Config{ServerName: *name, InsecureSkipVerify: true}, Dial: dial}
		client := &http.Client{Transport: tr}
		for i, n := range sizes {
			rec := record{Conn: c, Index: i, Proto: "HTTP/3.0", Size: n, StartNs: time.Now().UnixNano()}
			resp, err := client.Get(fmt.Sprintf("https://%s/bytes?n=%d", *connect, n))
			if err == nil {
				rec.FirstNs = time.Now().UnixNano()
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			rec.EndNs = time.Now().UnixNano()
			rec.LocalPort = local
			if err != nil {
				rec.Error = err.Error()
			}
			out.Encode(rec)
			time.Sleep(*gap)
		}
		tr.Close()
	}
}
