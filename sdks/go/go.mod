module cryosleep.io/go

go 1.21
