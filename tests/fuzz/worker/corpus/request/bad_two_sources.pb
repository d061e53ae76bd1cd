
req-2ƒ@"B3"up-img*#
/mmgw-fuzz-wk`"fuzz-wk-shm-key!"(0