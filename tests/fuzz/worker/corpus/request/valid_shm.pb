
req-2ƒ@"<-*%
/mmgw-fuzz-wkd`"fuzz-wk-shm-key!"(0