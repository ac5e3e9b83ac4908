module weir.example/go-window-count

go 1.24
