module tailscope/lab/go

go 1.24
