
req-2ƒ@"E6*.
/mmgw-fuzz-wk÷ÿÿÿÿÿÿÿÿ`"fuzz-wk-shm-key!"(0