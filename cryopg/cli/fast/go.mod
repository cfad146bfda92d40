module cryopg.local/fast

go 1.21
